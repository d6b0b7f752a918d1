// Unit tests of what the items and the list say (src/text.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseMessage } from '../../src/protocol';
import { INITIAL, IViewState, reduce } from '../../src/state';
import {
  IView,
  cellName,
  describeRefresh,
  label,
  modeText,
  pendingText,
  summary,
  title
} from '../../src/text';
import { statusData } from './fixtures';

function onState(extra: Record<string, unknown> = {}): IViewState {
  const m = parseMessage(statusData(extra));
  assert.ok(m);
  return reduce(INITIAL, m);
}

const view = (state: IViewState, phase: IView['phase'] = state.phase): IView => ({
  phase,
  state,
  notebook: 'derivs.ipynb'
});

test('the label: counts, failed ones apart, and what is going on', () => {
  assert.equal(label(view(onState())), '∂ 5 fresh · 2 stale');
  assert.equal(
    label(view(onState({ failed: 1, fresh: 4, stale: 2 }))),
    '∂ 4 fresh · 2 stale · 1 failed'
  );
  const refreshing = reduce(onState(), { type: 'sent', req: 1, kind: 'refresh' });
  assert.equal(label(view(refreshing)), '∂ 5 fresh · 2 stale · refreshing…');
});

test('never "off" before the kernel said so', () => {
  for (const phase of ['connecting', 'probing', 'restarting'] as const) {
    assert.equal(label(view(INITIAL, phase)), '∂ …');
  }
  assert.equal(label(view(INITIAL, 'off')), '∂ off');
  assert.equal(label(view(INITIAL, 'nokernel')), '∂ no kernel');
  assert.equal(label(view(INITIAL, 'dead')), '∂ kernel dead');
  assert.equal(label(view(INITIAL, 'noanswer')), '∂ no answer');
});

test('a shut-down kernel is not "not loaded in this kernel"', () => {
  const t = title(view(INITIAL, 'nokernel'));
  assert.match(t, /derivs\.ipynb: no kernel/);
  assert.doesNotMatch(t, /not loaded/);
});

test('summary and tooltip name the notebook and the reasons, no jargon', () => {
  const v = view(onState());
  assert.equal(summary(v), 'ipyrefresh in derivs.ipynb: 7 cached derivatives, 5 fresh, 2 stale');
  assert.match(title(v), /grad\(h\): g redefined in cell \[12\]/);
  assert.doesNotMatch(title(v) + modeText(v.state.status!), /world/);
  assert.match(title(view(INITIAL, 'off')), /%load_ext ipyrefresh/);
});

test('when stale ones rebuild, in words', () => {
  assert.match(modeText(onState().status!), /rebuild when next called.*tape compiler, autograd backend/);
  assert.match(modeText(onState({ mode: 'eager' }).status!), /right after the cell/);
});

test('a refresh waiting behind a running cell says so', () => {
  let s = reduce(onState(), { type: 'kernel', status: 'busy' });
  s = reduce(s, { type: 'sent', req: 1, kind: 'refresh' });
  assert.match(pendingText(s) ?? '', /waiting for the running cell to finish/);
  s = reduce(s, { type: 'processing', req: 1 });
  assert.equal(pendingText(s), 'Refreshing stale derivatives…');
  assert.equal(pendingText(onState()), null);
});

test('refresh reports and cell names', () => {
  assert.equal(
    describeRefresh({ name: null, rebuilt: ['grad(h)'], pending: ['hessian(f)'], failed: [] }),
    'Rebuilt grad(h); hessian(f) will rebuild at the next call.'
  );
  assert.equal(describeRefresh({ name: null, rebuilt: [], pending: [], failed: [] }), 'Nothing was stale.');
  assert.equal(
    describeRefresh({ name: null, rebuilt: [], pending: [], failed: ['grad(h): ValueError: no.'] }),
    'Failed: grad(h): ValueError: no.'
  );
  assert.equal(cellName(2, '\ndef g(x):\n    return x'), 'cell 2: def g(x):');
  assert.equal(cellName(3, ''), 'cell 3');
  assert.equal(cellName(1, 'x'.repeat(60)).length, 'cell 1: '.length + 40);
});
