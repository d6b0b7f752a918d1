import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';

import { DerivativesButton } from './button';
import { ChannelRegistry } from './channel';
import { follow } from './follow';
import { focusSettled } from './popup';
import { SubjectRegistry } from './subject';
import { addToolbarItems } from './toolbar';

const PLUGIN_ID = 'ipyrefresh:status';

namespace CommandIDs {
  export const refresh = 'ipyrefresh:refresh-stale';
  export const show = 'ipyrefresh:show-status';
}

/**
 * JupyterLab: a status-bar item for the notebook in front (hidden for other tabs, like
 * JupyterLab's kernel item). Notebook 7, which has no status bar: the same button in
 * each notebook's toolbar. Both open the list of derivatives; two commands (palette) do
 * the same from the keyboard.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    "Fresh and stale derivatives of a notebook's kernel, in the status bar or the toolbar.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar, ICommandPalette, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    labShell: ILabShell | null
  ) => {
    const subjects = new SubjectRegistry(new ChannelRegistry());
    const activate = (id: string) => app.shell.activateById(id);
    // The notebook in front: the shell's current widget, if it is a notebook. (The
    // tracker's current notebook stays the last one while a Launcher or a text file is
    // in front; its numbers must not show there.)
    const current = (): NotebookPanel | null => {
      const widget = app.shell.currentWidget;
      return widget && tracker.has(widget) ? (widget as NotebookPanel) : null;
    };

    let statusItem: DerivativesButton | null = null;
    let toolbarItems: ((panel: NotebookPanel) => DerivativesButton | null) | null = null;
    if (statusBar) {
      const item = new DerivativesButton({
        classes: ['ipyrefresh-StatusItem', 'jp-StatusBar-GroupItem', 'jp-mod-highlighted'],
        placement: 'above',
        activate
      });
      const changed = follow(app, tracker, labShell, current, panel => {
        item.subject = panel ? subjects.get(panel) : null;
      });
      statusBar.registerStatusItem(PLUGIN_ID, {
        item,
        align: 'left',
        rank: 4,
        isActive: () => item.subject !== null,
        activeStateChanged: changed
      });
      statusItem = item;
    } else {
      toolbarItems = addToolbarItems(app, subjects, activate);
    }

    /** The button that describes the notebook in front, if any. */
    const button = (): DerivativesButton | null => {
      const panel = current() ?? tracker.currentWidget;
      if (statusItem) {
        return statusItem.subject ? statusItem : null;
      }
      return panel && toolbarItems ? toolbarItems(panel) : null;
    };

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'ipyrefresh: Refresh Stale Derivatives',
      caption: "Rebuild the stale derivatives in the notebook's kernel now",
      isEnabled: () => button()?.subject?.channel?.state.phase === 'on',
      execute: () => {
        const target = button();
        target?.subject?.channel?.refresh();
        target?.open(false); // show the progress and the outcome
      }
    });
    app.commands.addCommand(CommandIDs.show, {
      label: 'ipyrefresh: Show Derivatives',
      caption: "List the derivatives in the notebook's kernel and why any is stale",
      isEnabled: () => button() !== null,
      execute: async () => {
        // Run from the palette, the palette closes after this returns and gives the
        // focus back to the notebook, which hands it on to its active cell (posted
        // messages, a frame each). Let the focus settle first, then move it into the list.
        await focusSettled();
        button()?.open(true);
      }
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.refresh, category: 'ipyrefresh' });
      palette.addItem({ command: CommandIDs.show, category: 'ipyrefresh' });
    }
  }
};

export default plugin;
