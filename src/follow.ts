import { ILabShell, JupyterFrontEnd } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISignal, Signal } from '@lumino/signaling';

/**
 * Call `apply` with the notebook in front (`current()`, null when the tab in front is not
 * a notebook) whenever that changes; the returned signal fires after each change.
 */
export function follow(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  labShell: ILabShell | null,
  current: () => NotebookPanel | null,
  apply: (panel: NotebookPanel | null) => void
): ISignal<INotebookTracker, void> {
  const changed = new Signal<INotebookTracker, void>(tracker);
  let shown: NotebookPanel | null | undefined = undefined;
  const update = () => {
    const panel = current();
    if (panel !== shown) {
      shown = panel;
      apply(panel);
      changed.emit();
    }
  };
  labShell?.currentChanged.connect(update);
  tracker.currentChanged.connect(update);
  tracker.widgetAdded.connect(update);
  void app.restored.then(update);
  update();
  return changed;
}
