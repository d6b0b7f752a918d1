import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import {
  ChannelEvent,
  FrontEndMessage,
  INITIAL,
  IViewState,
  TARGET,
  parseMessage,
  reduce,
  refreshMessage,
  requestMessage,
  shouldProbe
} from './protocol';

/**
 * The ipyrefresh comm of one kernel connection.
 *
 * The front end opens the comm when the kernel is up (and again after each restart); a
 * kernel without ipyrefresh closes it at once, and the state says "off". When ipyrefresh
 * is loaded later (`%load_ext`), the kernel opens a comm itself, which `adopt` takes.
 */
export class KernelChannel {
  constructor(readonly kernel: Kernel.IKernelConnection) {
    kernel.registerCommTarget(TARGET, this._adopt);
    kernel.statusChanged.connect(this._onKernelStatus, this);
    kernel.connectionStatusChanged.connect(this._onConnection, this);
    kernel.disposed.connect(() => this.dispose());
    this._onKernelStatus(kernel, kernel.status);
  }

  get state(): IViewState {
    return this._state;
  }

  get changed(): ISignal<this, IViewState> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Ask the kernel to rebuild stale derivatives (all, or those depending on `name`). */
  refresh(name?: string | null): boolean {
    return this._send(refreshMessage(name));
  }

  /** Ask for the status now (normally the kernel pushes it after each cell). */
  request(): boolean {
    if (!this._send(requestMessage())) {
      this._probe();
    }
    return true;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    const kernel = this.kernel;
    if (!kernel.isDisposed) {
      kernel.statusChanged.disconnect(this._onKernelStatus, this);
      kernel.connectionStatusChanged.disconnect(this._onConnection, this);
      kernel.removeCommTarget(TARGET, this._adopt);
      if (this._comm && !this._comm.isDisposed) {
        try {
          this._comm.close();
        } catch {
          // the kernel is gone already
        }
      }
    }
    this._comm = null;
    Signal.clearData(this);
  }

  private _emit(event: ChannelEvent): void {
    const next = reduce(this._state, event);
    if (next !== this._state) {
      this._state = next;
      this._changed.emit(next);
    }
  }

  private _onKernelStatus(_: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (this._disposed) {
      return;
    }
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._probed = false; // comms die with the kernel process
      this._comm = null;
    }
    this._emit({ type: 'kernel', status });
    if (shouldProbe(this._state, status, this._probed)) {
      this._probe();
    }
  }

  /**
   * (Re)connected. After a restart this is when the new kernel can be reached, and the
   * kernel's own "idle" may have gone by before the socket was back (JupyterLab then
   * shows "Starting" until the next message): so probe now rather than wait for it.
   * Back from a dropped connection, updates sent meanwhile were lost: ask again.
   */
  private _onConnection(
    _: Kernel.IKernelConnection,
    status: Kernel.ConnectionStatus
  ): void {
    if (status !== 'connected' || this._disposed) {
      return;
    }
    if (this._comm && !this._comm.isDisposed) {
      this._send(requestMessage());
    } else if (!this._probed && this.kernel.status !== 'dead') {
      this._probe();
    }
  }

  private _probe(): void {
    if (this._disposed || this.kernel.isDisposed) {
      return;
    }
    this._probed = true;
    let comm: Kernel.IComm;
    try {
      comm = this.kernel.createComm(TARGET);
    } catch (reason) {
      console.warn('ipyrefresh: could not open a comm', reason);
      return;
    }
    this._emit({ type: 'probe' });
    this._attach(comm);
    try {
      comm.open(requestMessage());
    } catch (reason) {
      console.warn('ipyrefresh: could not open a comm', reason);
    }
  }

  /** The kernel opened the comm (ipyrefresh was just loaded there). */
  private _adopt = (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._disposed) {
      comm.close();
      return;
    }
    this._attach(comm);
    this._onData(msg.content.data);
  };

  private _attach(comm: Kernel.IComm): void {
    const old = this._comm;
    this._comm = comm;
    if (old && old !== comm && !old.isDisposed) {
      old.onClose = () => undefined; // not ours any more: its close must not say "off"
      try {
        old.close();
      } catch {
        // ignore
      }
    }
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      if (this._comm === comm) {
        this._onData(msg.content.data);
      }
    };
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
        this._emit({ type: 'closed' });
      }
    };
  }

  private _onData(data: unknown): void {
    const message = parseMessage(data);
    if (message) {
      this._emit(message);
    }
  }

  private _send(message: FrontEndMessage): boolean {
    const comm = this._comm;
    if (!comm || comm.isDisposed || this._disposed) {
      return false;
    }
    try {
      comm.send(message as any);
      return true;
    } catch (reason) {
      console.warn('ipyrefresh: could not send', reason);
      return false;
    }
  }

  private _state: IViewState = INITIAL;
  private _changed = new Signal<this, IViewState>(this);
  private _comm: Kernel.IComm | null = null;
  private _probed = false;
  private _disposed = false;
}

/** One channel per kernel connection, created on demand, dropped with the connection. */
export class ChannelRegistry {
  constructor() {
    // Leaving the page: close our comms so the kernels stop sending to nobody.
    window.addEventListener('pagehide', () => this.disposeAll());
  }

  disposeAll(): void {
    for (const channel of [...this._channels.values()]) {
      channel.dispose();
    }
    this._channels.clear();
  }

  get(kernel: Kernel.IKernelConnection): KernelChannel {
    let channel = this._channels.get(kernel);
    if (!channel || channel.isDisposed) {
      channel = new KernelChannel(kernel);
      this._channels.set(kernel, channel);
      kernel.disposed.connect(() => this._channels.delete(kernel));
    }
    return channel;
  }

  private _channels = new Map<Kernel.IKernelConnection, KernelChannel>();
}
