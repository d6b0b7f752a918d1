import { NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { ChannelRegistry, KernelChannel } from './channel';
import { INITIAL } from './state';
import { IView } from './text';

/** Where a reason's cell is in the notebook now. */
export interface ICellPlace {
  index: number;
  source: string;
}

/**
 * One notebook as the items see it: its kernel's channel (which follows kernel changes
 * and restarts), what to show when it has no kernel, and its cells by id.
 */
export class NotebookSubject implements IDisposable {
  constructor(
    readonly panel: NotebookPanel,
    private readonly _channels: ChannelRegistry
  ) {
    const context = panel.sessionContext;
    context.kernelChanged.connect(this._bind, this);
    context.sessionChanged.connect(this._bind, this);
    context.statusChanged.connect(this._bind, this);
    context.connectionStatusChanged.connect(this._bind, this);
    panel.context.pathChanged.connect(this._notify, this);
    void context.ready.then(() => this._bind());
    panel.disposed.connect(() => this.dispose());
    this._bind();
  }

  /** Something this subject shows changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get channel(): KernelChannel | null {
    return this._channel;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** What an item should show for this notebook now. */
  view(): IView {
    const notebook = this.panel.context.path.split('/').pop() ?? '';
    const channel = this._channel;
    if (channel && !channel.isDisposed) {
      return { phase: channel.state.phase, state: channel.state, notebook };
    }
    // No kernel connection (yet): starting up, or really none (shut down, "No Kernel").
    const context = this.panel.sessionContext;
    const starting =
      !context.hasNoKernel ||
      ['initializing', 'starting', 'restarting'].includes(context.kernelDisplayStatus);
    return { phase: starting ? 'connecting' : 'nokernel', state: INITIAL, notebook };
  }

  /** The cell with this id, if the notebook still has it. */
  findCell(cellId: string): ICellPlace | null {
    const cells = this.panel.content.widgets;
    const index = cells.findIndex(cell => cell.model.id === cellId);
    return index < 0 ? null : { index, source: cells[index].model.sharedModel.getSource() };
  }

  /** Select the cell with this id, scroll to it and give the notebook the focus. */
  revealCell(cellId: string, activate: (id: string) => void): boolean {
    const place = this.findCell(cellId);
    if (!place) {
      return false;
    }
    const notebook = this.panel.content;
    activate(this.panel.id);
    notebook.mode = 'command';
    notebook.activeCellIndex = place.index;
    const cell = notebook.widgets[place.index];
    void notebook.scrollToCell(cell, 'center').then(() => notebook.activate());
    return true;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._channel?.changed.disconnect(this._notify, this);
    this._channel = null;
    Signal.clearData(this);
  }

  private _bind(): void {
    if (this._disposed) {
      return;
    }
    const kernel = this.panel.sessionContext.session?.kernel ?? null;
    const channel = kernel && !kernel.isDisposed ? this._channels.get(kernel) : null;
    if (channel !== this._channel) {
      this._channel?.changed.disconnect(this._notify, this);
      this._channel = channel;
      channel?.changed.connect(this._notify, this);
    }
    this._notify();
  }

  private _notify(): void {
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private _channel: KernelChannel | null = null;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;
}

/** One subject per notebook panel, made on first use. */
export class SubjectRegistry {
  constructor(private readonly _channels: ChannelRegistry) {}

  get(panel: NotebookPanel): NotebookSubject {
    let subject = this._subjects.get(panel);
    if (!subject || subject.isDisposed) {
      subject = new NotebookSubject(panel, this._channels);
      this._subjects.set(panel, subject);
    }
    return subject;
  }

  private _subjects = new WeakMap<NotebookPanel, NotebookSubject>();
}
