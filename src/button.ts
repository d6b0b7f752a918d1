import { Widget } from '@lumino/widgets';

import { DerivativesList } from './list';
import { AnchoredPopup, Placement } from './popup';
import { INITIAL } from './state';
import { NotebookSubject } from './subject';
import { IView, label, summary, title } from './text';

export interface IButtonOptions {
  /** CSS classes of the button (the status bar's and the toolbar's differ). */
  classes: string[];
  placement: Placement;
  /** Bring a widget of the main area to the front (for "show this cell"). */
  activate: (id: string) => void;
}

/**
 * "∂ 5 fresh · 2 stale" for one notebook, as a real button: a Tab stop, named for screen
 * readers, opened with Enter or Space as well as a click. It opens the list of
 * derivatives in a popup, which the keyboard can use and leave with Escape.
 */
export class DerivativesButton extends Widget {
  constructor(private readonly _options: IButtonOptions) {
    super({ node: document.createElement('button') });
    const node = this.node as HTMLButtonElement;
    node.type = 'button';
    node.setAttribute('aria-haspopup', 'dialog');
    node.setAttribute('aria-expanded', 'false');
    this.addClass('ipyrefresh-Button');
    for (const name of _options.classes) {
      this.addClass(name);
    }
    this._mark = document.createElement('span');
    this._mark.className = 'ipyrefresh-Button-mark';
    this._mark.setAttribute('aria-hidden', 'true');
    this._text = document.createElement('span');
    this._text.className = 'ipyrefresh-Button-text';
    node.append(this._mark, this._text);
    // A click from Enter or Space has no pointer position (detail 0): keyboard users get
    // the focus moved into the list.
    node.addEventListener('click', event => this.toggle(event.detail === 0));
    node.addEventListener('keydown', event => {
      // Escape while the button itself has the focus closes the list too.
      if (event.key === 'Escape' && this._popup) {
        event.preventDefault();
        this._popup.close(true);
      }
    });
    this._render();
  }

  /** The notebook it describes (null: none, and the button is hidden by its owner). */
  get subject(): NotebookSubject | null {
    return this._subject;
  }

  set subject(subject: NotebookSubject | null) {
    if (subject === this._subject) {
      return;
    }
    this._subject?.changed.disconnect(this._render, this);
    this._subject = subject;
    subject?.changed.connect(this._render, this);
    if (this._popup && subject === null) {
      this._popup.close(false);
    }
    this._render();
  }

  get isOpen(): boolean {
    return this._popup !== null;
  }

  /** Open or close the list; with `focus`, opening moves the focus into it. */
  toggle(focus: boolean): void {
    if (this._popup) {
      this._popup.close(true);
      return;
    }
    this.open(focus);
  }

  /** Open the list (if closed); with `focus`, move the focus into it. */
  open(focus: boolean): void {
    if (this._popup) {
      if (focus) {
        this._popup.focusFirst();
      }
      return;
    }
    const list = new DerivativesList({
      view: () => this._view(),
      refresh: name => this._subject?.channel?.refresh(name),
      checkAgain: () => this._subject?.channel?.request(),
      findCell: id => this._subject?.findCell(id) ?? null,
      revealCell: id => {
        this._popup?.close(false);
        this._subject?.revealCell(id, this._options.activate);
      }
    });
    const popup = new AnchoredPopup(list, this.node, this._options.placement, () => {
      if (this._popup === popup) {
        this._popup = null;
        this._list = null;
        this.removeClass('jp-mod-clicked');
        this.node.setAttribute('aria-expanded', 'false');
      }
    });
    popup.node.setAttribute('aria-labelledby', list.headingId);
    this._popup = popup;
    this._list = list;
    this.addClass('jp-mod-clicked');
    this.node.setAttribute('aria-expanded', 'true');
    popup.open(focus);
    this._subject?.channel?.request(); // a fresh answer for the list
  }

  close(): void {
    this._popup?.close(false);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.subject = null;
    this._popup?.close(false);
    super.dispose();
  }

  private _view(): IView {
    return this._subject
      ? this._subject.view()
      : { phase: 'nokernel', state: INITIAL, notebook: '' };
  }

  private _render(): void {
    if (this.isDisposed) {
      return;
    }
    const view = this._view();
    // Without a notebook to describe, the owner hides the button: it shows nothing.
    this._text.textContent = this._subject ? label(view) : '';
    this.node.title = title(view);
    this.node.setAttribute('aria-label', summary(view));
    this.node.dataset.phase = view.phase;
    const s = view.state.status;
    this.node.dataset.stale = String(view.phase === 'on' && s ? s.stale + s.failed : 0);
    this.node.setAttribute('aria-busy', String(view.state.pending.some(p => p.kind === 'refresh')));
    if (this._list && !this._list.isDisposed) {
      this._list.update();
      this._popup?.place();
    }
  }

  private _mark: HTMLSpanElement;
  private _text: HTMLSpanElement;
  private _subject: NotebookSubject | null = null;
  private _popup: AnchoredPopup | null = null;
  private _list: DerivativesList | null = null;
}
