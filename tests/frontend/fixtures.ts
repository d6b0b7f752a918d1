// Messages as the kernel sends them, for the unit tests.
import { SCHEMA } from '../../src/protocol';

export function statusData(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: 'status',
    schema: SCHEMA,
    instance: 'a1',
    seq: 1,
    req: null,
    fresh: 5,
    stale: 2,
    failed: 0,
    unbuilt: 0,
    total: 7,
    truncated: 0,
    mode: 'lazy',
    compiler: 'tape',
    backend: 'autograd',
    internal_errors: 0,
    entries: [
      {
        id: 3,
        name: 'grad(h)',
        target: 'h',
        state: 'stale',
        reasons: [
          {
            text: 'g redefined in cell [12]',
            what: 'g redefined',
            subject: 'g',
            cell: 12,
            cell_id: 'c-12'
          }
        ],
        error: null
      },
      { id: 4, name: 'hessian(f)', target: 'f', state: 'fresh', reasons: [], error: null }
    ],
    changes: [],
    ...extra
  };
}
