// Unit tests of the message parsing (src/protocol.ts), run by `jlpm test` (node's test
// runner), which tests/test_frontend_unit.py runs from pytest.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  SCHEMA,
  parseMessage,
  parseReason,
  refreshMessage,
  requestMessage
} from '../../src/protocol';
import { statusData } from './fixtures';

test('a schema 2 status message is read in full', () => {
  const m = parseMessage(statusData({ req: 4 }));
  assert.ok(m && m.type === 'status');
  assert.equal(m.req, 4);
  assert.equal(m.unnumbered, false);
  assert.equal(m.status.fresh, 5);
  assert.equal(m.status.backend, 'autograd');
  assert.deepEqual(m.status.entries[0].reasons[0], {
    text: 'g redefined in cell [12]',
    what: 'g redefined',
    subject: 'g',
    cell: 12,
    cellId: 'c-12'
  });
});

test('schema 1 (ipyrefresh 0.1 kernels) is still read: sentences, "error", no req', () => {
  const m = parseMessage({
    type: 'status',
    schema: 1,
    instance: 'z',
    seq: 2,
    fresh: 1,
    stale: 0,
    error: 1,
    total: 2,
    world: 9,
    entries: [
      { id: 1, name: 'grad(k)', state: 'error', reasons: ['a rebound in cell [3]'], error: 'boom' }
    ],
    changes: ['a rebound in cell [3]']
  });
  assert.ok(m && m.type === 'status');
  assert.equal(m.req, null);
  assert.equal(m.unnumbered, true);
  assert.equal(m.status.failed, 1);
  const [entry] = m.status.entries;
  assert.equal(entry.state, 'failed');
  assert.deepEqual(entry.reasons[0], {
    text: 'a rebound in cell [3]',
    what: 'a rebound',
    subject: '',
    cell: 3,
    cellId: null
  });
  assert.ok(!JSON.stringify(m).includes('world'));
});

test('a sentence without a cell is kept whole', () => {
  assert.deepEqual(parseReason('evicted from the cache'), {
    text: 'evicted from the cache',
    what: 'evicted from the cache',
    subject: '',
    cell: null,
    cellId: null
  });
});

test('garbage and unknown schemas', () => {
  assert.equal(parseMessage(null), null);
  assert.equal(parseMessage('status'), null);
  assert.equal(parseMessage([1, 2]), null);
  assert.equal(parseMessage({ schema: SCHEMA }), null);
  assert.equal(parseMessage({ type: 'whatever', schema: SCHEMA }), null);
  assert.deepEqual(parseMessage({ type: 'status', schema: 3 }), {
    type: 'incompatible',
    schema: 3
  });
});

test('malformed fields are made safe, unknown fields ignored', () => {
  const m = parseMessage(
    statusData({
      fresh: -3,
      stale: 'many',
      req: 'x',
      entries: [null, { name: 7, state: 'weird', reasons: 'x', error: '' }, 5],
      newField: { anything: true }
    })
  );
  assert.ok(m && m.type === 'status');
  assert.equal(m.req, null);
  assert.equal(m.status.fresh, 0);
  assert.equal(m.status.stale, 0);
  assert.deepEqual(m.status.entries, [
    { id: 0, name: '7', target: '', state: 'stale', reasons: [], error: null }
  ]);
});

test('front-end messages carry their request number', () => {
  assert.deepEqual(requestMessage(3), { type: 'request', req: 3 });
  assert.deepEqual(refreshMessage(4), { type: 'refresh', name: null, req: 4 });
  assert.deepEqual(refreshMessage(5, 'g'), { type: 'refresh', name: 'g', req: 5 });
  assert.deepEqual(refreshMessage(6, ''), { type: 'refresh', name: null, req: 6 });
});
