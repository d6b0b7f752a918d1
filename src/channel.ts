import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import {
  FrontEndMessage,
  TARGET,
  parseMessage,
  refreshMessage,
  requestMessage
} from './protocol';
import {
  ChannelEvent,
  INITIAL,
  IViewState,
  NO_ANSWER_MS,
  RequestKind,
  reduce,
  shouldProbe
} from './state';
import { CommLink } from './transport';

/** A request on its way, and how long the kernel has been idle without answering it. */
interface IWatch {
  kind: RequestKind;
  message: FrontEndMessage;
  idleMs: number;
  started: boolean;
  retried: boolean;
}

const TICK_MS = 1000;

/**
 * The ipyrefresh channel of one kernel connection.
 *
 * The front end opens a comm when the kernel is up (and again after each restart); a
 * kernel without ipyrefresh closes it at once, and the state says "off". When ipyrefresh
 * is loaded later (`%load_ext`), the kernel opens a comm itself, which `_adopt` takes.
 *
 * Every request carries a number the kernel echoes in its answer. A request the kernel
 * does not answer (it went unanswered while the kernel was idle for NO_ANSWER_MS, or the
 * kernel finished with it and said nothing) is sent once more on a new comm; if that
 * goes unanswered too, the state says so. Nothing fails silently.
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
    if (this._disposed || this._state.phase !== 'on') {
      return false;
    }
    const req = this._nextReq();
    this._ask('refresh', refreshMessage(req, name), name ?? null);
    return true;
  }

  /** Ask for the status now (normally the kernel pushes it after each cell). */
  request(): void {
    if (this._disposed) {
      return;
    }
    if (this._state.phase === 'on' && this._link && !this._link.isClosed) {
      this._ask('request', requestMessage(this._nextReq()));
    } else if (!['restarting', 'dead', 'connecting'].includes(this._state.phase)) {
      this._probe();
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._stopClock();
    const kernel = this.kernel;
    if (!kernel.isDisposed) {
      kernel.statusChanged.disconnect(this._onKernelStatus, this);
      kernel.connectionStatusChanged.disconnect(this._onConnection, this);
      kernel.removeCommTarget(TARGET, this._adopt);
      this._link?.close();
    }
    this._link = null;
    Signal.clearData(this);
  }

  private _emit(event: ChannelEvent): void {
    if (this._disposed) {
      return;
    }
    const next = reduce(this._state, event);
    if (next === this._state) {
      return;
    }
    this._state = next;
    // Forget the watches of requests that were answered (or dropped by a restart).
    for (const req of [...this._watches.keys()]) {
      if (!next.pending.some(p => p.req === req)) {
        this._watches.delete(req);
      }
    }
    if (this._watches.size === 0) {
      this._stopClock();
    }
    this._changed.emit(next);
  }

  private _onKernelStatus(_: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (this._disposed) {
      return;
    }
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._probed = false; // comms die with the kernel process
      this._link = null; // JupyterLab disposes its comm objects on a restart
      this._watches.clear();
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
  private _onConnection(_: Kernel.IKernelConnection, status: Kernel.ConnectionStatus): void {
    if (status !== 'connected' || this._disposed) {
      return;
    }
    if (this._link && !this._link.isClosed && this._state.phase === 'on') {
      this._ask('request', requestMessage(this._nextReq()));
    } else if (!this._probed && this.kernel.status !== 'dead') {
      this._probe();
    }
  }

  private _probe(): void {
    if (this._disposed || this.kernel.isDisposed) {
      return;
    }
    this._probed = true;
    this._ask('probe', requestMessage(this._nextReq()));
  }

  private _nextReq(): number {
    this._req += 1;
    return this._req;
  }

  /** Send a request and watch for its answer. */
  private _ask(kind: RequestKind, message: FrontEndMessage, name: string | null = null): void {
    this._emit({ type: 'sent', req: message.req, kind, name });
    this._watches.set(message.req, {
      kind,
      message,
      idleMs: 0,
      started: false,
      retried: false
    });
    this._startClock();
    if (!this._deliver(message, kind === 'probe')) {
      this._noAnswer(message.req, false);
    }
  }

  /** Put `message` on the wire: on the open comm, or opening a new one. */
  private _deliver(message: FrontEndMessage, fresh: boolean): boolean {
    const req = message.req;
    const delivery = {
      onStarted: () => {
        const watch = this._watches.get(req);
        if (watch) {
          watch.started = true;
          this._emit({ type: 'processing', req });
        }
      },
      onHandled: () => {
        // The kernel is done with the message. Its answer comes before its "idle",
        // so a request still waiting now got none.
        if (this._watches.has(req)) {
          this._noAnswer(req, true);
        }
      }
    };
    try {
      if (fresh || !this._link || this._link.isClosed) {
        const old = this._link;
        const link = CommLink.create(this.kernel, {
          onData: data => this._onData(link, data),
          onClose: () => this._onClose(link)
        });
        this._link = link;
        old?.close();
        link.open(message as unknown as JSONObject, delivery);
      } else {
        this._link.send(message as unknown as JSONObject, delivery);
      }
      return true;
    } catch (reason) {
      console.warn('ipyrefresh: could not send to the kernel', reason);
      return false;
    }
  }

  /** `req` went unanswered: send it once more on a new comm, then give up and say so. */
  private _noAnswer(req: number, handled: boolean): void {
    const watch = this._watches.get(req);
    if (!watch) {
      return;
    }
    if (!watch.retried) {
      watch.retried = true;
      watch.idleMs = 0;
      watch.started = false;
      this._emit({ type: 'noanswer', req, final: false, handled });
      if (this._deliver(watch.message, true)) {
        return;
      }
    }
    this._watches.delete(req);
    this._emit({ type: 'noanswer', req, final: true, handled });
  }

  private _startClock(): void {
    if (this._clock === null) {
      this._lastTick = Date.now();
      this._clock = window.setInterval(() => this._tick(), TICK_MS);
    }
  }

  private _stopClock(): void {
    if (this._clock !== null) {
      window.clearInterval(this._clock);
      this._clock = null;
    }
  }

  /** Count the time the kernel sits idle with our request unanswered and not started. */
  private _tick(): void {
    const now = Date.now();
    const elapsed = now - this._lastTick;
    this._lastTick = now;
    const kernel = this.kernel;
    if (kernel.isDisposed || kernel.connectionStatus !== 'connected' || kernel.status !== 'idle') {
      return; // busy with a cell (ours waits behind it), or not reachable: not its fault
    }
    for (const [req, watch] of [...this._watches]) {
      if (watch.started) {
        continue; // it is working on it (a long refresh): its "idle" will tell
      }
      watch.idleMs += elapsed;
      if (watch.idleMs >= NO_ANSWER_MS) {
        this._noAnswer(req, false);
      }
    }
  }

  /** The kernel opened the comm (ipyrefresh was just loaded there). */
  private _adopt = (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._disposed) {
      comm.close();
      return;
    }
    const old = this._link;
    const link = new CommLink(this.kernel, comm, {
      onData: data => this._onData(link, data),
      onClose: () => this._onClose(link)
    });
    this._link = link;
    old?.close();
    this._onData(link, msg.content.data);
  };

  private _onData(link: CommLink, data: unknown): void {
    const message = parseMessage(data);
    if (message) {
      this._emit(message);
    }
    if (message?.type === 'unloaded' && this._link === link) {
      this._link = null;
    }
  }

  private _onClose(link: CommLink): void {
    if (this._link === link) {
      this._link = null;
      this._emit({ type: 'closed' });
    }
  }

  private _state: IViewState = INITIAL;
  private _changed = new Signal<this, IViewState>(this);
  private _link: CommLink | null = null;
  private _watches = new Map<number, IWatch>();
  private _clock: number | null = null;
  private _lastTick = 0;
  private _req = 0;
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
