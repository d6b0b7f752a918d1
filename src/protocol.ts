/**
 * The ipyrefresh comm protocol (schema 1) and the status item's state machine.
 *
 * Pure functions only, no JupyterLab imports: the unit tests in tests/frontend run this file
 * under node. docs/frontend.md describes the messages; ipyrefresh/ipython/comm.py is the
 * kernel side.
 */

export const TARGET = 'ipyrefresh';
export const SCHEMA = 1;

export type EntryState = 'fresh' | 'stale' | 'error';

export interface IEntry {
  id: number;
  name: string;
  target: string;
  state: EntryState;
  reasons: string[];
  error: string | null;
}

export interface IStatus {
  /** Random per kernel-side channel: a reload or a new kernel process changes it. */
  instance: string;
  seq: number;
  fresh: number;
  stale: number;
  error: number;
  total: number;
  world: number;
  mode: string;
  compiler: string;
  entries: IEntry[];
  truncated: number;
  changes: string[];
}

export interface IRefreshed {
  name: string | null;
  rebuilt: string[];
  pending: string[];
  failed: string[];
}

/** A message from the kernel, after validation. */
export type KernelMessage =
  | { type: 'status'; status: IStatus }
  | { type: 'refreshed'; report: IRefreshed }
  | { type: 'unloaded' }
  | { type: 'error'; message: string }
  | { type: 'incompatible'; schema: unknown };

/** Messages the front end sends. */
export type FrontEndMessage =
  | { type: 'request' }
  | { type: 'refresh'; name: string | null };

export function requestMessage(): FrontEndMessage {
  return { type: 'request' };
}

export function refreshMessage(name?: string | null): FrontEndMessage {
  return { type: 'refresh', name: name ? name : null };
}

/**
 * Where the item stands with one kernel.
 *
 * - `none`: no kernel (or not yet connected);
 * - `probing`: the comm was opened, no answer yet;
 * - `off`: the kernel answered that it has no ipyrefresh loaded (or unloaded it);
 * - `on`: ipyrefresh is loaded and `status` is its latest report;
 * - `restarting`, `dead`: what the kernel is doing.
 */
export type Phase = 'none' | 'probing' | 'off' | 'on' | 'restarting' | 'dead';

export interface IViewState {
  phase: Phase;
  status: IStatus | null;
  lastRefresh: IRefreshed | null;
  problem: string | null;
}

export const INITIAL: IViewState = {
  phase: 'none',
  status: null,
  lastRefresh: null,
  problem: null
};

/** Events the reducer understands: kernel messages plus what the channel observes. */
export type ChannelEvent =
  | KernelMessage
  | { type: 'probe' }
  | { type: 'closed' }
  | { type: 'kernel'; status: string };

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function count(x: unknown): number {
  return typeof x === 'number' && Number.isFinite(x) && x >= 0 ? Math.floor(x) : 0;
}

function text(x: unknown): string {
  return typeof x === 'string' ? x : x === null || x === undefined ? '' : String(x);
}

function texts(x: unknown): string[] {
  return Array.isArray(x) ? x.map(text) : [];
}

function entryState(x: unknown): EntryState {
  return x === 'fresh' || x === 'error' ? x : 'stale';
}

function parseEntry(x: unknown): IEntry | null {
  if (!isObject(x)) {
    return null;
  }
  return {
    id: count(x.id),
    name: text(x.name) || '?',
    target: text(x.target),
    state: entryState(x.state),
    reasons: texts(x.reasons),
    error: x.error === null || x.error === undefined ? null : text(x.error)
  };
}

/**
 * Validate a message's `data`. Unknown fields are ignored (a newer kernel may add some);
 * a different schema number is reported as `incompatible`; garbage gives `null`.
 */
export function parseMessage(data: unknown): KernelMessage | null {
  if (!isObject(data) || typeof data.type !== 'string') {
    return null;
  }
  if (data.schema !== SCHEMA) {
    return { type: 'incompatible', schema: data.schema };
  }
  switch (data.type) {
    case 'status': {
      const entries: IEntry[] = [];
      if (Array.isArray(data.entries)) {
        for (const e of data.entries) {
          const entry = parseEntry(e);
          if (entry) {
            entries.push(entry);
          }
        }
      }
      return {
        type: 'status',
        status: {
          instance: text(data.instance),
          seq: count(data.seq),
          fresh: count(data.fresh),
          stale: count(data.stale),
          error: count(data.error),
          total: count(data.total),
          world: count(data.world),
          mode: text(data.mode),
          compiler: text(data.compiler),
          entries,
          truncated: count(data.truncated),
          changes: texts(data.changes)
        }
      };
    }
    case 'refreshed':
      return {
        type: 'refreshed',
        report: {
          name: typeof data.name === 'string' ? data.name : null,
          rebuilt: texts(data.rebuilt),
          pending: texts(data.pending),
          failed: texts(data.failed)
        }
      };
    case 'unloaded':
      return { type: 'unloaded' };
    case 'error':
      return { type: 'error', message: text(data.message) };
    default:
      return null;
  }
}

/** The next state after `event`. Never mutates `state`. */
export function reduce(state: IViewState, event: ChannelEvent): IViewState {
  switch (event.type) {
    case 'probe':
      return state.phase === 'on' ? state : { ...INITIAL, phase: 'probing' };
    case 'status': {
      // One kernel-side channel numbers its messages; an older one from the same
      // channel (a second comm answering late) is dropped. A new channel (reload,
      // restart, another kernel) counts from 1 again and is always taken.
      if (
        state.phase === 'on' &&
        state.status !== null &&
        event.status.instance === state.status.instance &&
        event.status.seq <= state.status.seq
      ) {
        return state;
      }
      return { ...state, phase: 'on', status: event.status, problem: null };
    }
    case 'refreshed':
      return { ...state, lastRefresh: event.report };
    case 'unloaded':
      return { ...INITIAL, phase: 'off' };
    case 'closed':
      // The kernel closed the comm: either it has no ipyrefresh (it refuses the target)
      // or ipyrefresh was unloaded. Either way, nothing to show.
      return state.phase === 'dead' || state.phase === 'restarting'
        ? state
        : { ...INITIAL, phase: 'off' };
    case 'error':
      return { ...state, problem: event.message };
    case 'incompatible':
      return {
        ...INITIAL,
        phase: 'off',
        problem: `the kernel's ipyrefresh speaks message schema ${String(
          event.schema
        )}, this front end ${SCHEMA}: upgrade one of them`
      };
    case 'kernel':
      switch (event.status) {
        case 'restarting':
        case 'autorestarting':
          return { ...INITIAL, phase: 'restarting' };
        case 'dead':
          return { ...INITIAL, phase: 'dead' };
        default:
          return state;
      }
    default:
      return state;
  }
}

/** The status bar text. */
export function label(state: IViewState): string {
  switch (state.phase) {
    case 'on': {
      const s = state.status as IStatus;
      const parts = [`${s.fresh} fresh`, `${s.stale} stale`];
      if (s.error > 0) {
        parts.push(`${s.error} failed`);
      }
      return `∂ ${parts.join(' · ')}`;
    }
    case 'probing':
    case 'restarting':
      return '∂ …';
    case 'dead':
      return '∂ off (kernel dead)';
    default:
      return '∂ off';
  }
}

/** The tooltip. */
export function title(state: IViewState): string {
  switch (state.phase) {
    case 'on': {
      const s = state.status as IStatus;
      const lines = [
        `ipyrefresh: ${s.total} cached derivative${s.total === 1 ? '' : 's'}, ` +
          `${s.fresh} fresh, ${s.stale} stale${s.error ? `, ${s.error} failed` : ''}`
      ];
      for (const e of s.entries) {
        if (e.state !== 'fresh') {
          lines.push(`${e.name}: ${e.reasons[0] ?? e.error ?? e.state}`);
        }
      }
      lines.push('Click for the list and to refresh.');
      return lines.join('\n');
    }
    case 'probing':
      return 'ipyrefresh: asking the kernel…';
    case 'restarting':
      return 'ipyrefresh: the kernel is restarting';
    case 'dead':
      return 'ipyrefresh: the kernel is dead';
    default:
      return (
        'ipyrefresh is not loaded in this kernel: run %load_ext ipyrefresh, ' +
        'or use the "Python 3 (ipyrefresh)" kernel.' +
        (state.problem ? `\n${state.problem}` : '')
      );
  }
}

/** Whether a kernel status should make the channel (re)open its comm. */
export function shouldProbe(
  state: IViewState,
  kernelStatus: string,
  probedSinceStart: boolean
): boolean {
  if (probedSinceStart) {
    return false;
  }
  if (state.phase === 'dead') {
    return kernelStatus === 'idle';
  }
  return kernelStatus === 'idle' || kernelStatus === 'busy';
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
  return parts.length ? parts.join('; ') : 'nothing was stale';
}
