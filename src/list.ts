import { Widget } from '@lumino/widgets';

import { IEntry, IReason, IStatus } from './protocol';
import { pendingRefresh } from './state';
import { ICellPlace } from './subject';
import {
  HOW_TO_LOAD,
  IView,
  cellName,
  countsSentence,
  describeRefresh,
  elsewhere,
  heading,
  modeText,
  pendingText,
  summary
} from './text';

/** What the list needs from its item: the view, and the actions of its buttons. */
export interface IListHost {
  view(): IView;
  refresh(name: string | null): void;
  checkAgain(): void;
  findCell(cellId: string): ICellPlace | null;
  revealCell(cellId: string): void;
}

let lists = 0;

/**
 * The popup's body: the derivatives of one notebook's kernel, failed and stale ones first,
 * each with why it is stale (a link to the cell that made it so) and a refresh button.
 * Re-rendered on every change; the focused control keeps the focus.
 */
export class DerivativesList extends Widget {
  constructor(private readonly _host: IListHost) {
    super();
    this.addClass('ipyrefresh-List');
    this._headingId = `ipyrefresh-heading-${++lists}`;
  }

  /** The id of the heading, which names the dialog. */
  get headingId(): string {
    return this._headingId;
  }

  protected onUpdateRequest(): void {
    const node = this.node;
    const focused = node.contains(document.activeElement)
      ? (document.activeElement as HTMLElement).dataset.key
      : undefined;
    node.textContent = '';
    this._render(node);
    if (focused) {
      const again = node.querySelector<HTMLElement>(`[data-key="${CSS.escape(focused)}"]`);
      (again && !(again as HTMLButtonElement).disabled ? again : this._fallbackFocus()).focus();
    }
  }

  private _fallbackFocus(): HTMLElement {
    return (this.node.closest('.ipyrefresh-Popup') as HTMLElement | null) ?? this.node;
  }

  private _render(node: HTMLElement): void {
    const view = this._host.view();
    const state = view.state;
    const h = el('h2', 'ipyrefresh-List-heading', heading(view));
    h.id = this._headingId;
    node.appendChild(h);

    if (view.phase !== 'on' || !state.status) {
      node.appendChild(el('p', 'ipyrefresh-List-summary', summary(view)));
      if (view.phase === 'off') {
        node.appendChild(el('p', 'ipyrefresh-List-note', HOW_TO_LOAD));
      }
      if (view.phase === 'off' || view.phase === 'noanswer') {
        const again = button('Check again', 'ipyrefresh-List-check', () =>
          this._host.checkAgain()
        );
        node.appendChild(again);
      }
      this._messages(node, view);
      return;
    }
    const s = state.status;
    node.appendChild(el('p', 'ipyrefresh-List-summary', countsSentence(s)));
    node.appendChild(el('p', 'ipyrefresh-List-note ipyrefresh-List-mode', modeText(s)));

    const pending = pendingRefresh(state);
    const toolbar = el('div', 'ipyrefresh-List-toolbar');
    const all = button(
      pending && !pending.name ? 'Refreshing…' : 'Refresh stale',
      'ipyrefresh-List-refreshAll',
      () => this._host.refresh(null)
    );
    all.disabled = pending !== null || s.stale + s.failed === 0;
    toolbar.appendChild(all);
    node.appendChild(toolbar);

    const progress = el('p', 'ipyrefresh-List-pending', pendingText(state) ?? '');
    progress.setAttribute('role', 'status');
    node.appendChild(progress);

    if (s.entries.length === 0) {
      node.appendChild(
        el('p', 'ipyrefresh-List-note', 'No derivatives cached yet: call grad(f)(x).')
      );
    }
    const list = el('ul', 'ipyrefresh-List-entries');
    for (const entry of s.entries) {
      list.appendChild(this._row(entry, pending !== null));
    }
    node.appendChild(list);
    if (s.truncated) {
      node.appendChild(
        el('p', 'ipyrefresh-List-note', `… and ${s.truncated} more (see %stale).`)
      );
    }
    this._messages(node, view);
    this._internal(node, s);
  }

  /** The refresh report, the last problem and any notice. */
  private _messages(node: HTMLElement, view: IView): void {
    const state = view.state;
    if (state.report) {
      const report = el('p', 'ipyrefresh-List-report', describeRefresh(state.report.refreshed));
      report.setAttribute('role', 'status');
      report.dataset.failed = String(state.report.refreshed.failed.length > 0);
      node.appendChild(report);
    }
    if (state.notice) {
      node.appendChild(el('p', 'ipyrefresh-List-note ipyrefresh-List-notice', state.notice));
    }
    if (state.problem) {
      const problem = el('p', 'ipyrefresh-List-problem', state.problem.text);
      problem.setAttribute('role', 'alert');
      node.appendChild(problem);
    }
  }

  private _internal(node: HTMLElement, s: IStatus): void {
    if (s.internalErrors > 0) {
      node.appendChild(
        el(
          'p',
          'ipyrefresh-List-problem',
          `ipyrefresh hit ${s.internalErrors} internal error${
            s.internalErrors === 1 ? '' : 's'
          }; derivatives stay correct but may rebuild more often (see the kernel's log).`
        )
      );
    }
  }

  private _row(entry: IEntry, busy: boolean): HTMLElement {
    const li = el('li', 'ipyrefresh-Entry');
    li.dataset.state = entry.state;
    li.dataset.name = entry.name;
    const line = el('div', 'ipyrefresh-Entry-line');
    line.appendChild(el('span', 'ipyrefresh-Entry-state', STATE_WORDS[entry.state]));
    line.appendChild(el('code', 'ipyrefresh-Entry-name', entry.name));
    if ((entry.state === 'stale' || entry.state === 'failed') && entry.target) {
      const target = entry.target;
      const refresh = button('Refresh', 'ipyrefresh-Entry-refresh', () =>
        this._host.refresh(target)
      );
      refresh.setAttribute('aria-label', `Refresh ${entry.name}`);
      refresh.dataset.key = `refresh:${entry.id}`;
      refresh.disabled = busy;
      line.appendChild(refresh);
    }
    li.appendChild(line);
    if (entry.state === 'stale' || entry.state === 'failed') {
      for (const reason of entry.reasons) {
        li.appendChild(this._reason(reason, entry.id));
      }
      if (entry.error) {
        li.appendChild(el('div', 'ipyrefresh-Entry-error', entry.error));
      }
    }
    return li;
  }

  /** "g redefined in [cell 2: def g(x):]", the link selecting that cell. */
  private _reason(reason: IReason, id: number): HTMLElement {
    const div = el('div', 'ipyrefresh-Entry-reason');
    const place = reason.cellId ? this._host.findCell(reason.cellId) : null;
    if (!reason.cellId || !place) {
      div.textContent = reason.cellId ? elsewhere(reason) : reason.text || reason.what;
      return div;
    }
    div.appendChild(document.createTextNode(`${reason.what} in `));
    const cellId = reason.cellId;
    const link = button(cellName(place.index + 1, place.source), 'ipyrefresh-Entry-cell', () =>
      this._host.revealCell(cellId)
    );
    link.classList.remove('ipyrefresh-List-button');
    link.dataset.key = `cell:${id}:${cellId}`;
    link.dataset.cellId = cellId;
    link.title = 'Show this cell';
    div.appendChild(link);
    return div;
  }

  private _headingId: string;
}

const STATE_WORDS: Record<IEntry['state'], string> = {
  fresh: 'fresh',
  stale: 'stale',
  failed: 'failed',
  unbuilt: 'not built'
};

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
  node.type = 'button';
  node.className = `ipyrefresh-List-button ${className}`;
  node.textContent = text;
  node.dataset.key = className;
  node.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return node;
}
