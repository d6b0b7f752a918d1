import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Signal } from '@lumino/signaling';

import { ChannelRegistry } from './channel';
import { StatusItem } from './item';

const PLUGIN_ID = 'ipyrefresh:status';

namespace CommandIDs {
  export const refresh = 'ipyrefresh:refresh-stale';
  export const show = 'ipyrefresh:show-status';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    "A status-bar item with the fresh and stale derivatives of the active notebook's kernel.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ) => {
    const channels = new ChannelRegistry();
    const item = new StatusItem();
    const activeChanged = new Signal<unknown, void>(item);

    const channelOf = (panel: NotebookPanel | null) => {
      const kernel = panel?.sessionContext.session?.kernel ?? null;
      return kernel ? channels.get(kernel) : null;
    };
    const follow = () => {
      item.channel = channelOf(tracker.currentWidget);
      activeChanged.emit();
    };

    // Every notebook's kernel gets its channel as soon as it has a kernel, so that
    // switching tabs shows the right numbers at once.
    tracker.widgetAdded.connect((_, panel) => {
      const context = panel.sessionContext;
      const bind = () => {
        channelOf(panel);
        if (panel === tracker.currentWidget) {
          follow();
        }
      };
      context.kernelChanged.connect(bind);
      context.sessionChanged.connect(bind);
      void context.ready.then(bind);
      bind();
    });
    tracker.currentChanged.connect(follow);
    follow();

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'ipyrefresh: Refresh Stale Derivatives',
      caption: "Rebuild the stale derivatives in the active notebook's kernel now",
      isEnabled: () => item.state.phase === 'on',
      execute: () => {
        item.channel?.refresh();
      }
    });
    app.commands.addCommand(CommandIDs.show, {
      label: 'ipyrefresh: Show Derivatives',
      caption: "List the derivatives in the active notebook's kernel and why any is stale",
      execute: () => {
        if (statusBar) {
          item.togglePopup();
        }
      }
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.refresh, category: 'ipyrefresh' });
      palette.addItem({ command: CommandIDs.show, category: 'ipyrefresh' });
    }

    if (statusBar) {
      statusBar.registerStatusItem(PLUGIN_ID, {
        item,
        align: 'left',
        rank: 4,
        isActive: () => tracker.currentWidget !== null,
        activeStateChanged: activeChanged
      });
    }
  }
};

export default plugin;
