import { Popup, showPopup } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { KernelChannel } from './channel';
import { IEntry, IViewState, INITIAL, describeRefresh, label, title } from './protocol';

/**
 * The status-bar item: "∂ 5 fresh · 2 stale" for the active notebook's kernel. A click
 * opens the list of derivatives, with the reason for each stale one and refresh buttons.
 */
export class StatusItem extends Widget {
  constructor() {
    super();
    this.addClass('ipyrefresh-StatusItem');
    this.addClass('jp-StatusBar-GroupItem');
    this.addClass('jp-mod-highlighted');
    this._text = document.createElement('span');
    this._text.className = 'jp-StatusBar-TextItem ipyrefresh-StatusItem-text';
    this.node.appendChild(this._text);
    this.node.addEventListener('click', () => this.togglePopup());
    this._render();
  }

  /** The channel of the active notebook's kernel (null: no kernel). */
  get channel(): KernelChannel | null {
    return this._channel;
  }

  set channel(channel: KernelChannel | null) {
    if (channel === this._channel) {
      return;
    }
    this._channel?.changed.disconnect(this._render, this);
    this._channel = channel;
    channel?.changed.connect(this._render, this);
    this._render();
  }

  get state(): IViewState {
    return this._channel && !this._channel.isDisposed ? this._channel.state : INITIAL;
  }

  togglePopup(): void {
    if (this._popup && !this._popup.isDisposed) {
      this._popup.dispose();
      this._popup = null;
      return;
    }
    this._list = new StatusList(this);
    this._popup = showPopup({
      body: this._list,
      anchor: this,
      align: 'left',
      hasDynamicSize: true
    });
    this._channel?.request(); // a fresh answer for the list
  }

  dispose(): void {
    this.channel = null;
    this._popup?.dispose();
    super.dispose();
  }

  private _render(): void {
    if (this.isDisposed) {
      return;
    }
    const state = this.state;
    this._text.textContent = label(state);
    this.node.title = title(state);
    this.node.dataset.phase = state.phase;
    const s = state.status;
    this.node.dataset.stale = String(s ? s.stale + s.error : 0);
    if (this._list && !this._list.isDisposed) {
      this._list.update();
    }
  }

  private _text: HTMLSpanElement;
  private _channel: KernelChannel | null = null;
  private _popup: Popup | null = null;
  private _list: StatusList | null = null;
}

/** The popup's body: one row per derivative, stale ones first. */
class StatusList extends Widget {
  constructor(private readonly item: StatusItem) {
    super();
    this.addClass('ipyrefresh-StatusList');
    this.update();
  }

  protected onUpdateRequest(): void {
    const node = this.node;
    node.textContent = '';
    const state = this.item.state;
    const channel = this.item.channel;
    const header = el('div', 'ipyrefresh-StatusList-header', 'ipyrefresh');
    node.appendChild(header);

    if (state.phase !== 'on' || !state.status) {
      node.appendChild(el('div', 'ipyrefresh-StatusList-note', title(state)));
      if (channel && (state.phase === 'off' || state.phase === 'none')) {
        node.appendChild(
          button('Check again', 'ipyrefresh-check', () => channel.request())
        );
      }
      return;
    }
    const s = state.status;
    header.textContent =
      `ipyrefresh — ${s.fresh} fresh · ${s.stale} stale` +
      (s.error ? ` · ${s.error} failed` : '') +
      ` (world ${s.world}, ${s.mode}, ${s.compiler})`;

    const toolbar = el('div', 'ipyrefresh-StatusList-toolbar');
    const all = button('Refresh stale', 'ipyrefresh-refresh-all', () => channel?.refresh());
    all.disabled = s.stale + s.error === 0;
    toolbar.appendChild(all);
    node.appendChild(toolbar);

    if (s.entries.length === 0) {
      node.appendChild(
        el('div', 'ipyrefresh-StatusList-note', 'No derivatives cached yet: call grad(f)(x).')
      );
    }
    const list = el('ul', 'ipyrefresh-StatusList-entries');
    for (const entry of s.entries) {
      list.appendChild(row(entry, channel));
    }
    node.appendChild(list);
    if (s.truncated) {
      node.appendChild(
        el('div', 'ipyrefresh-StatusList-note', `… and ${s.truncated} more (see %stale)`)
      );
    }
    if (state.lastRefresh) {
      node.appendChild(
        el('div', 'ipyrefresh-StatusList-report', describeRefresh(state.lastRefresh))
      );
    }
    if (state.problem) {
      node.appendChild(el('div', 'ipyrefresh-StatusList-problem', state.problem));
    }
  }
}

function row(entry: IEntry, channel: KernelChannel | null): HTMLElement {
  const li = el('li', 'ipyrefresh-Entry');
  li.dataset.state = entry.state;
  li.dataset.name = entry.name;
  li.appendChild(el('span', 'ipyrefresh-Entry-state', entry.state));
  li.appendChild(el('span', 'ipyrefresh-Entry-name', entry.name));
  if (entry.state !== 'fresh') {
    const target = entry.target;
    if (target && channel) {
      li.appendChild(
        button('refresh', 'ipyrefresh-Entry-refresh', () => channel.refresh(target))
      );
    }
    const why = entry.reasons.length ? entry.reasons : entry.error ? [entry.error] : [];
    for (const reason of why) {
      li.appendChild(el('div', 'ipyrefresh-Entry-reason', reason));
    }
  }
  return li;
}

function el(tag: string, className: string, text?: string): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function button(text: string, className: string, onClick: () => void): HTMLButtonElement {
  const node = document.createElement('button');
  node.className = `jp-Button jp-mod-styled jp-mod-small ${className}`;
  node.textContent = text;
  node.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return node;
}
