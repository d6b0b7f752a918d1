/**
 * The ipyrefresh comm protocol: message shapes, validation and the messages we send.
 *
 * Pure functions only, no JupyterLab imports: the unit tests in tests/frontend run this file
 * under node. docs/frontend.md describes the messages; ipyrefresh/ipython/comm.py is the
 * kernel side.
 */

export const TARGET = 'ipyrefresh';
/** The schema this front end speaks; it also reads schema 1 (ipyrefresh 0.1 kernels). */
export const SCHEMA = 2;
const READABLE = [1, 2];

export type EntryState = 'fresh' | 'stale' | 'failed' | 'unbuilt';

/** Why a derivative is stale: "g redefined" in the cell with id `cellId`. */
export interface IReason {
  /** The kernel's full sentence, e.g. "g redefined in cell [6]". */
  text: string;
  /** The sentence without its "in cell [N]" tail, e.g. "g redefined". */
  what: string;
  subject: string;
  /** The execution count of the cell (repeats after a restart: only for the text). */
  cell: number | null;
  /** The Jupyter cell id, when the kernel knows which cell it was. */
  cellId: string | null;
}

export interface IEntry {
  id: number;
  name: string;
  target: string;
  state: EntryState;
  reasons: IReason[];
  error: string | null;
}

export interface IStatus {
  /** Random per kernel-side channel: a reload or a new kernel process changes it. */
  instance: string;
  seq: number;
  fresh: number;
  stale: number;
  failed: number;
  unbuilt: number;
  total: number;
  truncated: number;
  mode: string;
  compiler: string;
  backend: string;
  internalErrors: number;
  entries: IEntry[];
  changes: IReason[];
}

export interface IRefreshed {
  name: string | null;
  rebuilt: string[];
  pending: string[];
  failed: string[];
}

/**
 * A message from the kernel, after validation. `req` answers our request of that number.
 * `unnumbered`: the kernel does not number its answers (schema 1), so this one answers
 * whatever request of its kind is waiting.
 */
export type KernelMessage =
  | { type: 'status'; req: number | null; unnumbered: boolean; status: IStatus }
  | { type: 'refreshed'; req: number | null; unnumbered: boolean; report: IRefreshed }
  | { type: 'unloaded' }
  | { type: 'error'; req: number | null; unnumbered: boolean; message: string }
  | { type: 'incompatible'; schema: unknown };

/** Messages the front end sends. */
export type FrontEndMessage =
  | { type: 'request'; req: number }
  | { type: 'refresh'; name: string | null; req: number };

export function requestMessage(req: number): FrontEndMessage {
  return { type: 'request', req };
}

export function refreshMessage(req: number, name?: string | null): FrontEndMessage {
  return { type: 'refresh', name: name ? name : null, req };
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function count(x: unknown): number {
  return typeof x === 'number' && Number.isFinite(x) && x >= 0 ? Math.floor(x) : 0;
}

function intOrNull(x: unknown): number | null {
  return typeof x === 'number' && Number.isInteger(x) ? x : null;
}

function text(x: unknown): string {
  return typeof x === 'string' ? x : x === null || x === undefined ? '' : String(x);
}

function texts(x: unknown): string[] {
  return Array.isArray(x) ? x.map(text) : [];
}

const IN_CELL = /^([\s\S]*) in cell \[(\d+)\]$/;

/** A reason from schema 2 (an object) or schema 1 (a sentence). */
export function parseReason(x: unknown): IReason {
  if (!isObject(x)) {
    const sentence = text(x);
    const match = IN_CELL.exec(sentence);
    return {
      text: sentence,
      what: match ? match[1] : sentence,
      subject: '',
      cell: match ? Number(match[2]) : null,
      cellId: null
    };
  }
  const sentence = text(x.text);
  return {
    text: sentence,
    what: text(x.what) || sentence,
    subject: text(x.subject),
    cell: intOrNull(x.cell),
    cellId: typeof x.cell_id === 'string' && x.cell_id ? x.cell_id : null
  };
}

function reasons(x: unknown): IReason[] {
  return Array.isArray(x) ? x.map(parseReason) : [];
}

function entryState(x: unknown): EntryState {
  if (x === 'error') {
    return 'failed'; // schema 1's name
  }
  return x === 'fresh' || x === 'failed' || x === 'unbuilt' ? x : 'stale';
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
    reasons: reasons(x.reasons),
    error: x.error === null || x.error === undefined || x.error === '' ? null : text(x.error)
  };
}

/**
 * Validate a message's `data`. Unknown fields are ignored (a newer kernel may add some);
 * a schema this front end cannot read is reported as `incompatible`; garbage gives `null`.
 */
export function parseMessage(data: unknown): KernelMessage | null {
  if (!isObject(data) || typeof data.type !== 'string') {
    return null;
  }
  if (!READABLE.includes(data.schema as number)) {
    return { type: 'incompatible', schema: data.schema };
  }
  const req = intOrNull(data.req);
  const unnumbered = data.schema === 1;
  switch (data.type) {
    case 'status': {
      const entries: IEntry[] = [];
      for (const e of Array.isArray(data.entries) ? data.entries : []) {
        const entry = parseEntry(e);
        if (entry) {
          entries.push(entry);
        }
      }
      return {
        type: 'status',
        req,
        unnumbered,
        status: {
          instance: text(data.instance),
          seq: count(data.seq),
          fresh: count(data.fresh),
          stale: count(data.stale),
          failed: count(data.failed ?? data.error),
          unbuilt: count(data.unbuilt),
          total: count(data.total),
          truncated: count(data.truncated),
          mode: text(data.mode),
          compiler: text(data.compiler),
          backend: text(data.backend),
          internalErrors: count(data.internal_errors),
          entries,
          changes: reasons(data.changes)
        }
      };
    }
    case 'refreshed':
      return {
        type: 'refreshed',
        req,
        unnumbered,
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
      return { type: 'error', req, unnumbered, message: text(data.message) };
    default:
      return null;
  }
}
