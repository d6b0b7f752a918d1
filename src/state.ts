/**
 * Where the front end stands with one kernel: a pure reducer over what the kernel says
 * and what the channel observes. No JupyterLab imports (tests/frontend runs it under node).
 */

import { IRefreshed, IStatus, KernelMessage, SCHEMA } from './protocol';

/**
 * - `connecting`: the kernel is starting, or not reached yet;
 * - `probing`: we asked whether ipyrefresh is loaded, no answer yet;
 * - `off`: the kernel has no ipyrefresh loaded (or unloaded it);
 * - `on`: ipyrefresh is loaded and `status` is its latest report;
 * - `noanswer`: the kernel did not answer our first question;
 * - `restarting`, `dead`: what the kernel is doing.
 */
export type Phase = 'connecting' | 'probing' | 'off' | 'on' | 'noanswer' | 'restarting' | 'dead';

export type RequestKind = 'probe' | 'request' | 'refresh';

/** A request that has not had its answer yet. */
export interface IPending {
  req: number;
  kind: RequestKind;
  /** For a refresh: the function whose dependents to refresh (null: all stale ones). */
  name: string | null;
  /** The kernel started on it (it said "busy" for our message). */
  processing: boolean;
  /** It went unanswered once and was sent again on a new comm. */
  retried: boolean;
}

export interface IProblem {
  kind: 'noanswer' | 'error' | 'incompatible';
  text: string;
}

/** The last refresh's report, shown while the state it produced lasts. */
export interface IReport {
  refreshed: IRefreshed;
  /** The status that followed the refresh (its fingerprint); null until it arrives. */
  basis: string | null;
}

export interface IViewState {
  phase: Phase;
  status: IStatus | null;
  pending: IPending[];
  report: IReport | null;
  /** The kernel is running something (a cell): our requests wait behind it. */
  kernelBusy: boolean;
  problem: IProblem | null;
  /** Something worth saying once, e.g. that a restart came before an answer. */
  notice: string | null;
}

export const INITIAL: IViewState = {
  phase: 'connecting',
  status: null,
  pending: [],
  report: null,
  kernelBusy: false,
  problem: null,
  notice: null
};

/** How long a request may go without any sign of life while the kernel is idle. */
export const NO_ANSWER_MS = 10_000;

/** Events the reducer understands: kernel messages plus what the channel observes. */
export type ChannelEvent =
  | KernelMessage
  | { type: 'sent'; req: number; kind: RequestKind; name?: string | null }
  | { type: 'processing'; req: number }
  | { type: 'noanswer'; req: number; final: boolean; handled: boolean }
  | { type: 'closed' }
  | { type: 'kernel'; status: string };

/** What a status says about the derivatives, without its sequence number. */
export function fingerprint(s: IStatus): string {
  return JSON.stringify([
    s.instance,
    s.fresh,
    s.stale,
    s.failed,
    s.unbuilt,
    s.entries.map(e => [e.id, e.state])
  ]);
}

/** What is still pending once a message answering `req` (or, unnumbered, `kinds`) came. */
function answered(
  state: IViewState,
  event: { req: number | null; unnumbered: boolean },
  kinds: RequestKind[]
): IPending[] {
  if (event.unnumbered) {
    return state.pending.filter(p => !kinds.includes(p.kind));
  }
  const req = event.req;
  return req === null ? state.pending : state.pending.filter(p => p.req !== req);
}

const ANY: RequestKind[] = ['probe', 'request', 'refresh'];

/** Any message from the kernel shows it is alive: a "no answer" problem is over. */
function alive(problem: IProblem | null): IProblem | null {
  return problem && problem.kind === 'noanswer' ? null : problem;
}

export function noAnswerText(final: boolean, handled: boolean): string {
  if (!final) {
    return (
      `No answer from the kernel after ${NO_ANSWER_MS / 1000} s; ` +
      'asking again on a new connection…'
    );
  }
  if (handled) {
    return (
      'The kernel took the request but sent no answer: another "ipyrefresh" comm ' +
      'target may be registered there. Restart the kernel, or try again.'
    );
  }
  return (
    'The kernel did not answer: it may be stuck or unreachable. ' +
    'Try again, or restart the kernel.'
  );
}

/** The next state after `event`. Never mutates `state`. */
export function reduce(state: IViewState, event: ChannelEvent): IViewState {
  switch (event.type) {
    case 'sent': {
      const pending: IPending = {
        req: event.req,
        kind: event.kind,
        name: event.name ?? null,
        processing: false,
        retried: false
      };
      const next = {
        ...state,
        pending: [...state.pending.filter(p => p.req !== event.req), pending],
        notice: null
      };
      if (event.kind === 'probe') {
        return state.phase === 'on' ? next : { ...next, phase: 'probing', problem: null };
      }
      return event.kind === 'refresh' ? { ...next, problem: null, report: null } : next;
    }
    case 'processing':
      return {
        ...state,
        pending: state.pending.map(p => (p.req === event.req ? { ...p, processing: true } : p))
      };
    case 'noanswer': {
      const mine = state.pending.find(p => p.req === event.req);
      if (!mine) {
        return state; // answered meanwhile
      }
      const problem: IProblem = {
        kind: 'noanswer',
        text: noAnswerText(event.final, event.handled)
      };
      if (!event.final) {
        return {
          ...state,
          problem,
          pending: state.pending.map(p =>
            p.req === event.req ? { ...p, retried: true, processing: false } : p
          )
        };
      }
      return {
        ...state,
        problem,
        pending: state.pending.filter(p => p.req !== event.req),
        phase: mine.kind === 'probe' && state.phase !== 'on' ? 'noanswer' : state.phase
      };
    }
    case 'status': {
      const pending = answered(state, event, ['probe', 'request']);
      // One kernel-side channel numbers its messages; an older one from the same
      // channel (a second comm answering late) is dropped. A new channel (reload,
      // restart, another kernel) counts from 1 again and is always taken.
      if (
        state.phase === 'on' &&
        state.status !== null &&
        event.status.instance === state.status.instance &&
        event.status.seq <= state.status.seq
      ) {
        return { ...state, pending, problem: alive(state.problem) };
      }
      let report = state.report;
      if (report) {
        const now = fingerprint(event.status);
        if (report.basis === null) {
          report = { ...report, basis: now };
        } else if (report.basis !== now) {
          report = null; // the derivatives changed since: the report is history
        }
      }
      return {
        ...state,
        phase: 'on',
        status: event.status,
        pending,
        report,
        problem: alive(state.problem)
      };
    }
    case 'refreshed':
      return {
        ...state,
        pending: answered(state, event, ['refresh']),
        report: { refreshed: event.report, basis: null },
        problem: alive(state.problem)
      };
    case 'error':
      return {
        ...state,
        pending: answered(state, event, ANY),
        problem: { kind: 'error', text: event.message }
      };
    case 'unloaded':
      return { ...INITIAL, phase: 'off', kernelBusy: state.kernelBusy };
    case 'closed':
      // The kernel closed the comm: either it has no ipyrefresh (it refuses the target)
      // or ipyrefresh was unloaded. Either way, nothing to show.
      return state.phase === 'dead' || state.phase === 'restarting'
        ? state
        : { ...INITIAL, phase: 'off', kernelBusy: state.kernelBusy };
    case 'incompatible':
      return {
        ...INITIAL,
        phase: 'off',
        problem: {
          kind: 'incompatible',
          text:
            `The kernel's ipyrefresh speaks message schema ${String(event.schema)}, ` +
            `this front end ${SCHEMA}: install the same ipyrefresh version in both.`
        }
      };
    case 'kernel':
      switch (event.status) {
        case 'restarting':
        case 'autorestarting': {
          const lost = state.pending.some(p => p.kind === 'refresh');
          return {
            ...INITIAL,
            phase: 'restarting',
            notice: lost ? 'The kernel restarted before it answered the refresh.' : null
          };
        }
        case 'dead':
          return { ...INITIAL, phase: 'dead' };
        case 'busy':
          return state.kernelBusy ? state : { ...state, kernelBusy: true };
        case 'idle':
          return state.kernelBusy ? { ...state, kernelBusy: false } : state;
        default:
          return state;
      }
    default:
      return state;
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

/** The refresh waiting for its answer, if any. */
export function pendingRefresh(state: IViewState): IPending | null {
  return state.pending.find(p => p.kind === 'refresh') ?? null;
}
