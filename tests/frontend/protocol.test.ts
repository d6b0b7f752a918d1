// Unit tests of the front end's message handling (src/protocol.ts), run by `jlpm test`
// (node's test runner), which tests/test_frontend_unit.py runs from pytest.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  INITIAL,
  IViewState,
  SCHEMA,
  describeRefresh,
  label,
  parseMessage,
  reduce,
  refreshMessage,
  requestMessage,
  shouldProbe,
  title
} from '../../src/protocol';

function statusData(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: 'status',
    schema: SCHEMA,
    instance: 'a1',
    seq: 1,
    fresh: 5,
    stale: 2,
    error: 0,
    total: 7,
    world: 12,
    mode: 'lazy',
    compiler: 'tape',
    entries: [
      {
        id: 3,
        name: 'grad(h)',
        target: 'h',
        state: 'stale',
        reasons: ['g redefined in cell [12]'],
        error: null
      },
      { id: 4, name: 'hessian(f)', target: 'f', state: 'fresh', reasons: [], error: null }
    ],
    truncated: 0,
    changes: ['g redefined in cell [12]'],
    ...extra
  };
}

function feed(...data: unknown[]): IViewState {
  let state: IViewState = reduce(INITIAL, { type: 'probe' });
  for (const d of data) {
    const message = parseMessage(d);
    assert.ok(message, `not parsed: ${JSON.stringify(d)}`);
    state = reduce(state, message);
  }
  return state;
}

test('a status message gives the label and the stale reasons', () => {
  const state = feed(statusData());
  assert.equal(state.phase, 'on');
  assert.equal(label(state), '∂ 5 fresh · 2 stale');
  assert.match(title(state), /grad\(h\): g redefined in cell \[12\]/);
  assert.equal(state.status?.entries[0].reasons[0], 'g redefined in cell [12]');
});

test('failed derivatives are counted apart', () => {
  const state = feed(statusData({ stale: 0, error: 1, fresh: 1, total: 2 }));
  assert.equal(label(state), '∂ 1 fresh · 0 stale · 1 failed');
});

test('before any answer, and when the kernel refuses the comm, the item says off', () => {
  assert.equal(label(INITIAL), '∂ off');
  const probing = reduce(INITIAL, { type: 'probe' });
  assert.equal(label(probing), '∂ …');
  const refused = reduce(probing, { type: 'closed' });
  assert.equal(refused.phase, 'off');
  assert.equal(label(refused), '∂ off');
  assert.match(title(refused), /%load_ext ipyrefresh/);
});

test('unload and comm close reset to off, dropping the old numbers', () => {
  const on = feed(statusData());
  const unloaded = reduce(on, parseMessage({ type: 'unloaded', schema: SCHEMA })!);
  assert.equal(unloaded.phase, 'off');
  assert.equal(unloaded.status, null);
  assert.equal(reduce(on, { type: 'closed' }).phase, 'off');
});

test('an older message of the same kernel-side channel is dropped, a new channel is taken', () => {
  const newer = feed(statusData({ seq: 5, stale: 0, fresh: 7 }));
  const late = reduce(newer, parseMessage(statusData({ seq: 4 }))!);
  assert.equal(late, newer, 'a late seq 4 must not overwrite seq 5');
  // After %unload_ext + %load_ext (or a restart) the kernel counts from 1 again.
  const reloaded = reduce(newer, parseMessage(statusData({ seq: 1, instance: 'b2' }))!);
  assert.equal(reloaded.status?.instance, 'b2');
  assert.equal(label(reloaded), '∂ 5 fresh · 2 stale');
});

test('kernel restart and death', () => {
  const on = feed(statusData());
  const restarting = reduce(on, { type: 'kernel', status: 'restarting' });
  assert.equal(restarting.phase, 'restarting');
  assert.equal(restarting.status, null);
  assert.equal(label(restarting), '∂ …');
  // the comm of the dead process closing must not turn "restarting" into "off"
  assert.equal(reduce(restarting, { type: 'closed' }).phase, 'restarting');
  const dead = reduce(on, { type: 'kernel', status: 'dead' });
  assert.equal(dead.phase, 'dead');
  assert.equal(label(dead), '∂ off (kernel dead)');
  assert.equal(reduce(on, { type: 'kernel', status: 'busy' }), on);
});

test('probing: once per kernel start, when it is up', () => {
  assert.equal(shouldProbe(INITIAL, 'idle', false), true);
  assert.equal(shouldProbe(INITIAL, 'busy', false), true);
  assert.equal(shouldProbe(INITIAL, 'idle', true), false, 'not again after every cell');
  assert.equal(shouldProbe(INITIAL, 'starting', false), false);
  assert.equal(shouldProbe(INITIAL, 'unknown', false), false);
  const dead = reduce(INITIAL, { type: 'kernel', status: 'dead' });
  assert.equal(shouldProbe(dead, 'dead', false), false);
});

test('garbage and other schemas', () => {
  assert.equal(parseMessage(null), null);
  assert.equal(parseMessage('status'), null);
  assert.equal(parseMessage([1, 2]), null);
  assert.equal(parseMessage({ schema: SCHEMA }), null);
  assert.equal(parseMessage({ type: 'whatever', schema: SCHEMA }), null);
  const future = parseMessage({ type: 'status', schema: SCHEMA + 1 });
  assert.deepEqual(future, { type: 'incompatible', schema: SCHEMA + 1 });
  const state = reduce(feed(statusData()), future!);
  assert.equal(state.phase, 'off');
  assert.match(title(state), /schema 2/);
});

test('malformed fields are made safe, unknown fields ignored', () => {
  const message = parseMessage(
    statusData({
      fresh: -3,
      stale: 'many',
      entries: [null, { name: 7, state: 'weird', reasons: 'x' }, 5],
      newField: { anything: true }
    })
  );
  assert.ok(message && message.type === 'status');
  const s = message.status;
  assert.equal(s.fresh, 0);
  assert.equal(s.stale, 0);
  assert.equal(s.entries.length, 1);
  assert.deepEqual(s.entries[0], {
    id: 0,
    name: '7',
    target: '',
    state: 'stale',
    reasons: [],
    error: null
  });
});

test('refresh reports and errors are kept next to the status', () => {
  const on = feed(statusData());
  const report = parseMessage({
    type: 'refreshed',
    schema: SCHEMA,
    name: null,
    rebuilt: ['grad(h)'],
    pending: ['hessian(f)'],
    failed: []
  })!;
  const after = reduce(on, report);
  assert.equal(after.status, on.status);
  assert.equal(
    describeRefresh(after.lastRefresh!),
    'rebuilt grad(h); hessian(f) will rebuild at the next call'
  );
  const err = reduce(after, parseMessage({ type: 'error', schema: SCHEMA, message: 'boom' })!);
  assert.equal(err.problem, 'boom');
  assert.equal(err.phase, 'on');
  assert.equal(
    describeRefresh({ name: null, rebuilt: [], pending: [], failed: [] }),
    'nothing was stale'
  );
});

test('front-end messages', () => {
  assert.deepEqual(requestMessage(), { type: 'request' });
  assert.deepEqual(refreshMessage(), { type: 'refresh', name: null });
  assert.deepEqual(refreshMessage('g'), { type: 'refresh', name: 'g' });
  assert.deepEqual(refreshMessage(''), { type: 'refresh', name: null });
});
