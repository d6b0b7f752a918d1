import { JupyterFrontEnd } from '@jupyterlab/application';
import { NotebookPanel } from '@jupyterlab/notebook';

import { DerivativesButton } from './button';
import { SubjectRegistry } from './subject';

/**
 * Where there is no status bar (Notebook 7): the same button in every notebook's toolbar,
 * next to the kernel's name, describing that notebook. Returns the button of a panel.
 */
export function addToolbarItems(
  app: JupyterFrontEnd,
  subjects: SubjectRegistry,
  activate: (id: string) => void
): (panel: NotebookPanel) => DerivativesButton | null {
  const items = new WeakMap<NotebookPanel, DerivativesButton>();
  app.docRegistry.addWidgetExtension('Notebook', {
    createNew: (panel: NotebookPanel) => {
      const item = new DerivativesButton({
        classes: ['ipyrefresh-ToolbarItem'],
        placement: 'below',
        activate
      });
      item.subject = subjects.get(panel);
      if (!panel.toolbar.insertAfter('kernelName', 'ipyrefresh', item)) {
        panel.toolbar.addItem('ipyrefresh', item);
      }
      items.set(panel, item);
      return item;
    }
  });
  return panel => items.get(panel) ?? null;
}
