/**
 * Every sentence the status item and its list show. Pure functions of the view state (no
 * JupyterLab imports; tests/frontend runs them under node).
 */

import { IReason, IRefreshed, IStatus } from './protocol';
import { IViewState, Phase, pendingRefresh } from './state';

/** What one item shows: a channel's state, or why there is none. */
export interface IView {
  /** `nokernel`: the notebook has no kernel (none chosen, or shut down). */
  phase: Phase | 'nokernel';
  state: IViewState;
  /** The notebook's file name ("" when unknown). */
  notebook: string;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function counts(s: IStatus, sep: string): string {
  const parts = [`${s.fresh} fresh`, `${s.stale} stale`];
  if (s.failed > 0) {
    parts.push(`${s.failed} failed`);
  }
  return parts.join(sep);
}

/** The status bar text. */
export function label(view: IView): string {
  const { state } = view;
  switch (view.phase) {
    case 'on': {
      let text = `∂ ${counts(state.status as IStatus, ' · ')}`;
      if (pendingRefresh(state)) {
        text += ' · refreshing…';
      } else if (state.problem?.kind === 'noanswer') {
        text += ' · no answer';
      }
      return text;
    }
    case 'connecting':
    case 'probing':
    case 'restarting':
      return '∂ …';
    case 'noanswer':
      return '∂ no answer';
    case 'dead':
      return '∂ kernel dead';
    case 'nokernel':
      return '∂ no kernel';
    default:
      return '∂ off';
  }
}

/** One sentence for screen readers and the tooltip's first line. */
export function summary(view: IView): string {
  const where = view.notebook ? ` in ${view.notebook}` : '';
  const { state } = view;
  switch (view.phase) {
    case 'on': {
      const s = state.status as IStatus;
      let text =
        `ipyrefresh${where}: ${plural(s.total, 'cached derivative')}, ` +
        counts(s, ', ');
      if (pendingRefresh(state)) {
        text += '; refreshing';
      } else if (state.problem?.kind === 'noanswer') {
        text += '; the kernel does not answer';
      }
      return text;
    }
    case 'connecting':
      return `ipyrefresh${where}: connecting to the kernel…`;
    case 'probing':
      return `ipyrefresh${where}: asking the kernel…`;
    case 'restarting':
      return `ipyrefresh${where}: the kernel is restarting…`;
    case 'noanswer':
      return `ipyrefresh${where}: the kernel does not answer`;
    case 'dead':
      return `ipyrefresh${where}: the kernel died and was not restarted`;
    case 'nokernel':
      return `ipyrefresh${where}: no kernel (start one to see its derivatives)`;
    default:
      return `ipyrefresh${where}: not loaded in this kernel`;
  }
}

/** The list's first line: "3 cached derivatives: 1 fresh, 2 stale." */
export function countsSentence(s: IStatus): string {
  const unbuilt = s.unbuilt > 0 ? `, ${s.unbuilt} not built yet` : '';
  return `${plural(s.total, 'cached derivative')}: ${counts(s, ', ')}${unbuilt}.`;
}

/** How to turn ipyrefresh on, for the `off` state. */
export const HOW_TO_LOAD =
  'Run %load_ext ipyrefresh in the notebook, or pick the "Python 3 (ipyrefresh)" kernel.';

/** The tooltip: the summary, the stale reasons, and what a click does. */
export function title(view: IView): string {
  const lines = [summary(view)];
  const { state } = view;
  if (view.phase === 'on' && state.status) {
    for (const e of state.status.entries) {
      if (e.state === 'stale' || e.state === 'failed') {
        const why = e.reasons[0] ? reasonText(e.reasons[0]) : e.error ?? e.state;
        lines.push(`${e.name}: ${why}`);
      }
    }
  } else if (view.phase === 'off') {
    lines.push(HOW_TO_LOAD);
  }
  if (state.problem) {
    lines.push(state.problem.text);
  }
  lines.push('Click, or press Enter, for the list.');
  return lines.join('\n');
}

/** A reason as plain text (the tooltip; the list links the cell instead). */
export function reasonText(r: IReason): string {
  return r.text || r.what;
}

/** When stale derivatives rebuild, in words. */
export function modeText(s: IStatus): string {
  const when =
    s.mode === 'eager'
      ? 'Stale derivatives rebuild right after the cell that made them stale.'
      : 'Stale derivatives rebuild when next called, or now with Refresh.';
  const how = [s.compiler && `${s.compiler} compiler`, s.backend && `${s.backend} backend`]
    .filter(Boolean)
    .join(', ');
  return how ? `${when} (${how})` : when;
}

/** The list's heading. */
export function heading(view: IView): string {
  return view.notebook ? `Derivatives in ${view.notebook}` : 'Derivatives';
}

/** What a pending refresh is doing, or null. */
export function pendingText(state: IViewState): string | null {
  const p = pendingRefresh(state);
  if (!p) {
    return null;
  }
  const what = p.name ? `Refreshing what depends on ${p.name}` : 'Refreshing stale derivatives';
  if (!p.processing && state.kernelBusy) {
    return `${what}: waiting for the running cell to finish…`;
  }
  return `${what}…`;
}

/** One line summarising a refresh report. */
export function describeRefresh(r: IRefreshed): string {
  const parts: string[] = [];
  if (r.rebuilt.length) {
    parts.push(`rebuilt ${r.rebuilt.join(', ')}`);
  }
  if (r.pending.length) {
    parts.push(`${r.pending.join(', ')} will rebuild at the next call`);
  }
  if (r.failed.length) {
    parts.push(`failed: ${r.failed.join('; ')}`);
  }
  const text = parts.join('; ').replace(/\.$/, '');
  return text ? `${text[0].toUpperCase()}${text.slice(1)}.` : 'Nothing was stale.';
}

/** How the list names a cell: its position and its first line. */
export function cellName(position: number, source: string): string {
  const first = source.split('\n').find(line => line.trim()) ?? '';
  const short = first.length > 40 ? `${first.slice(0, 39)}…` : first;
  return short ? `cell ${position}: ${short.trim()}` : `cell ${position}`;
}

/** Where a reason happened, when its cell is not in this notebook (any more). */
export function elsewhere(r: IReason): string {
  return r.cell !== null ? `${r.what} (in a cell not in this notebook)` : r.text || r.what;
}
