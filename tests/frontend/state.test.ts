// Unit tests of the state machine (src/state.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SCHEMA, parseMessage } from '../../src/protocol';
import { ChannelEvent, INITIAL, IViewState, reduce, shouldProbe } from '../../src/state';
import { statusData } from './fixtures';

type Raw = Record<string, unknown>;

/** Feed the reducer: kernel messages (raw, with a schema) or channel events. */
function run(state: IViewState, ...events: (ChannelEvent | Raw)[]) {
  for (const e of events) {
    const event = 'schema' in e ? parseMessage(e) : (e as ChannelEvent);
    assert.ok(event, `not parsed: ${JSON.stringify(e)}`);
    state = reduce(state, event);
  }
  return state;
}

const on = () => run(INITIAL, { type: 'sent', req: 1, kind: 'probe' }, statusData({ req: 1 }));

test('a probe answered: on, and nothing pending', () => {
  const probing = reduce(INITIAL, { type: 'sent', req: 1, kind: 'probe' });
  assert.equal(probing.phase, 'probing');
  assert.equal(probing.pending.length, 1);
  const state = on();
  assert.equal(state.phase, 'on');
  assert.deepEqual(state.pending, []);
});

test('the kernel refusing the comm: off; a restart does not say off', () => {
  const probing = reduce(INITIAL, { type: 'sent', req: 1, kind: 'probe' });
  assert.equal(reduce(probing, { type: 'closed' }).phase, 'off');
  const restarting = reduce(on(), { type: 'kernel', status: 'restarting' });
  assert.equal(restarting.phase, 'restarting');
  assert.equal(restarting.status, null);
  assert.equal(reduce(restarting, { type: 'closed' }).phase, 'restarting');
  assert.equal(reduce(on(), { type: 'kernel', status: 'dead' }).phase, 'dead');
});

test('an older message of the same kernel-side channel is dropped, a new one taken', () => {
  const newer = run(on(), statusData({ seq: 5, stale: 0, fresh: 7 }));
  const late = run(newer, statusData({ seq: 4 }));
  assert.equal(late.status, newer.status, 'a late seq 4 must not overwrite seq 5');
  const reloaded = run(newer, statusData({ seq: 1, instance: 'b2' }));
  assert.equal(reloaded.status?.instance, 'b2');
});

test('a refresh: pending until its own answer, then the report', () => {
  let s = reduce(on(), { type: 'sent', req: 2, kind: 'refresh', name: null });
  assert.equal(s.pending[0].kind, 'refresh');
  s = run(s, statusData({ seq: 2, req: 9 })); // somebody else's answer
  assert.equal(s.pending.length, 1);
  s = run(s, <Raw>{
    type: 'refreshed',
    schema: SCHEMA,
    req: 2,
    name: null,
    rebuilt: ['grad(h)'],
    pending: [],
    failed: []
  });
  assert.deepEqual(s.pending, []);
  assert.deepEqual(s.report?.refreshed.rebuilt, ['grad(h)']);
});

test('the report lasts while the derivatives stay as the refresh left them', () => {
  const fresh = statusData({
    seq: 3,
    fresh: 1,
    stale: 0,
    total: 1,
    entries: [{ id: 3, name: 'grad(h)', target: 'h', state: 'fresh', reasons: [] }]
  });
  let s = run(
    reduce(on(), { type: 'sent', req: 2, kind: 'refresh' }),
    <Raw>{ type: 'refreshed', schema: SCHEMA, req: 2, rebuilt: ['grad(h)'], pending: [], failed: [] },
    fresh
  );
  assert.ok(s.report);
  s = run(s, { ...fresh, seq: 4, req: 5 }); // the list asked again: same derivatives
  assert.ok(s.report, 'an unchanged status keeps the report');
  s = run(s, statusData({ seq: 5 })); // grad(h) stale again
  assert.equal(s.report, null, 'an outdated report must go');
});

test('no answer: first a retry, then a problem; any later answer clears it', () => {
  let s = reduce(on(), { type: 'sent', req: 2, kind: 'refresh' });
  s = reduce(s, { type: 'noanswer', req: 2, final: false, handled: false });
  assert.equal(s.pending[0].retried, true);
  assert.match(s.problem?.text ?? '', /asking again/);
  s = reduce(s, { type: 'noanswer', req: 2, final: true, handled: false });
  assert.deepEqual(s.pending, []);
  assert.equal(s.problem?.kind, 'noanswer');
  assert.match(s.problem?.text ?? '', /did not answer/);
  assert.equal(s.phase, 'on');
  s = run(s, statusData({ seq: 6 }));
  assert.equal(s.problem, null);
});

test('a probe without an answer: phase noanswer', () => {
  let s = reduce(INITIAL, { type: 'sent', req: 1, kind: 'probe' });
  s = reduce(s, { type: 'noanswer', req: 1, final: true, handled: true });
  assert.equal(s.phase, 'noanswer');
  assert.match(s.problem?.text ?? '', /sent no answer/);
  // an answer that was already given is not undone by a late "no answer"
  assert.equal(reduce(on(), { type: 'noanswer', req: 1, final: true, handled: false }).problem, null);
});

test('a restart drops what was pending and says a refresh was lost', () => {
  const s = reduce(on(), { type: 'sent', req: 2, kind: 'refresh' });
  const restarting = reduce(s, { type: 'kernel', status: 'autorestarting' });
  assert.deepEqual(restarting.pending, []);
  assert.match(restarting.notice ?? '', /restarted before it answered/);
});

test('kernel busy and idle are tracked for "waiting for the running cell"', () => {
  const busy = reduce(on(), { type: 'kernel', status: 'busy' });
  assert.equal(busy.kernelBusy, true);
  assert.equal(reduce(busy, { type: 'kernel', status: 'idle' }).kernelBusy, false);
});

test('errors from the kernel are kept as the problem', () => {
  const s = run(
    reduce(on(), { type: 'sent', req: 2, kind: 'refresh' }),
    <Raw>{ type: 'error', schema: SCHEMA, req: 2, message: 'boom' }
  );
  assert.deepEqual(s.pending, []);
  assert.deepEqual(s.problem, { kind: 'error', text: 'boom' });
});

test('another schema: off, saying what to upgrade', () => {
  const s = run(on(), <Raw>{ type: 'status', schema: 7 });
  assert.equal(s.phase, 'off');
  assert.match(s.problem?.text ?? '', /schema 7/);
});

test('probing: once per kernel start, when it is up', () => {
  assert.equal(shouldProbe(INITIAL, 'idle', false), true);
  assert.equal(shouldProbe(INITIAL, 'busy', false), true);
  assert.equal(shouldProbe(INITIAL, 'idle', true), false);
  assert.equal(shouldProbe(INITIAL, 'starting', false), false);
  const dead = reduce(INITIAL, { type: 'kernel', status: 'dead' });
  assert.equal(shouldProbe(dead, 'dead', false), false);
});

test('a schema 1 kernel does not number its answers: they answer what is waiting', () => {
  let s = reduce(INITIAL, { type: 'sent', req: 1, kind: 'probe' });
  s = run(s, statusData({ schema: 1, req: undefined }));
  assert.equal(s.phase, 'on');
  assert.deepEqual(s.pending, [], 'an old kernel answering the probe must not look silent');
  s = reduce(s, { type: 'sent', req: 2, kind: 'refresh' });
  s = run(s, statusData({ schema: 1, seq: 2 })); // a pushed status: not the refresh's answer
  assert.equal(s.pending.length, 1);
  s = run(s, <Raw>{ type: 'refreshed', schema: 1, rebuilt: ['grad(h)'], pending: [], failed: [] });
  assert.deepEqual(s.pending, []);
});
