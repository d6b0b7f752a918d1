import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { TARGET } from './protocol';

/** What happened to one message we sent, as the kernel reported it on IOPub. */
export interface IDelivery {
  /** The kernel started handling it ("busy" with our message as parent). */
  onStarted(): void;
  /** The kernel is done with it ("idle"), or refused it (an error reply). */
  onHandled(): void;
}

/**
 * One ipyrefresh comm with a kernel, sent on the kernel's main shell.
 *
 * JupyterLab 4.6 sends a comm's messages over a kernel subshell ("Kernel Comms over
 * subshells"), and after a restart or an automatic restart it can keep a subshell id
 * that the new kernel process does not have: the kernel then drops every message
 * ("Unknown subshell_id"). Our requests also must not run beside a user's cell (a
 * refresh rebuilds from the namespace the cell is changing). So the messages are built
 * here and sent without a subshell id, to the main shell, whatever the setting; the comm
 * object JupyterLab keeps is only used to receive (its `onMsg` and `onClose`).
 */
export class CommLink {
  constructor(
    readonly kernel: Kernel.IKernelConnection,
    readonly comm: Kernel.IComm,
    handlers: { onData: (data: unknown) => void; onClose: () => void }
  ) {
    comm.onMsg = msg => {
      if (!this._closed) {
        handlers.onData(msg.content.data);
      }
    };
    comm.onClose = () => {
      if (!this._closed) {
        this._closed = true;
        handlers.onClose();
      }
    };
  }

  /** A new comm (not opened yet: call `open`). */
  static create(
    kernel: Kernel.IKernelConnection,
    handlers: { onData: (data: unknown) => void; onClose: () => void }
  ): CommLink {
    return new CommLink(kernel, kernel.createComm(TARGET), handlers);
  }

  get id(): string {
    return this.comm.commId;
  }

  get isClosed(): boolean {
    return this._closed || this.comm.isDisposed;
  }

  open(data: JSONObject, delivery?: IDelivery): void {
    this._sendShell('comm_open', { comm_id: this.id, target_name: TARGET, data }, delivery);
  }

  send(data: JSONObject, delivery?: IDelivery): void {
    this._sendShell('comm_msg', { comm_id: this.id, data }, delivery);
  }

  /** Close the comm on both sides (quietly: our own close is no news to us). */
  close(): void {
    if (this._closed) {
      return;
    }
    this._closed = true;
    try {
      if (!this.kernel.isDisposed && this.kernel.status !== 'dead') {
        this._sendShell('comm_close', { comm_id: this.id, data: {} });
      }
    } catch {
      // the kernel is gone already
    }
    this.comm.dispose(); // JupyterLab's side only: no second comm_close
  }

  private _sendShell(
    msgType: 'comm_open' | 'comm_msg' | 'comm_close',
    content: JSONObject,
    delivery?: IDelivery
  ): void {
    const kernel = this.kernel;
    const msg = KernelMessage.createMessage<KernelMessage.ICommMsgMsg<'shell'>>({
      msgType: msgType as 'comm_msg',
      channel: 'shell',
      session: kernel.clientId,
      username: kernel.username,
      content: content as KernelMessage.ICommMsgMsg<'shell'>['content']
      // no subshellId: the main shell
    });
    const future = kernel.sendShellMessage(msg, false, true);
    if (delivery) {
      future.onIOPub = iopub => {
        if (iopub.header.msg_type === 'status') {
          const state = (iopub.content as { execution_state?: string }).execution_state;
          if (state === 'busy') {
            delivery.onStarted();
          }
        }
      };
      future.onReply = reply => {
        if ((reply.content as { status?: string }).status === 'error') {
          delivery.onHandled(); // refused (e.g. addressed to a subshell it lacks)
        }
      };
      future.done.then(
        () => delivery.onHandled(),
        () => undefined // disposed by a restart: the channel hears of that anyway
      );
    } else {
      future.done.catch(() => undefined);
    }
  }

  private _closed = false;
}
