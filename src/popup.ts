import { MessageLoop } from '@lumino/messaging';
import { PanelLayout, Widget } from '@lumino/widgets';

export type Placement = 'above' | 'below';

/**
 * A non-modal dialog anchored to a button: above it (status bar) or below it (toolbar).
 *
 * Keyboard: opening moves the focus into it; Escape closes it and gives the focus back
 * to where it was (the button, or what had it before a command opened the popup). A
 * click outside, or the focus leaving for elsewhere, closes it too.
 */
export class AnchoredPopup extends Widget {
  constructor(
    readonly body: Widget,
    private readonly _anchor: HTMLElement,
    private readonly _placement: Placement,
    private readonly _onClosed: () => void
  ) {
    super();
    this.addClass('ipyrefresh-Popup');
    this.addClass('jp-ThemedContainer');
    this.node.setAttribute('role', 'dialog');
    this.node.tabIndex = -1; // focusable as a whole when it has nothing else to focus
    const layout = (this.layout = new PanelLayout());
    layout.addWidget(body);
    this._resizer = new ResizeObserver(() => this.place());
  }

  /** Show it; move the focus into it when `focus` (keyboard and commands do). */
  open(focus: boolean): void {
    const active = document.activeElement;
    this._returnTo = active instanceof HTMLElement ? active : null;
    Widget.attach(this, document.body);
    MessageLoop.sendMessage(this.body, Widget.Msg.UpdateRequest); // render it now
    this.place();
    this._resizer.observe(this.body.node);
    document.addEventListener('mousedown', this, true);
    window.addEventListener('resize', this);
    this.node.addEventListener('keydown', this);
    this.node.addEventListener('focusout', this);
    if (focus) {
      this.focusFirst();
    }
  }

  /** Close it; give the focus back when it was inside (or `returnFocus` asks). */
  close(returnFocus = false): void {
    if (this.isDisposed) {
      return;
    }
    const hadFocus = this.node.contains(document.activeElement);
    this._resizer.disconnect();
    document.removeEventListener('mousedown', this, true);
    window.removeEventListener('resize', this);
    if (returnFocus || hadFocus) {
      this._restoreFocus();
    }
    this.dispose();
    this._onClosed();
  }

  /** Focus the first enabled control, or the dialog itself. */
  focusFirst(): void {
    const first = this.node.querySelector<HTMLElement>(
      'button:not(:disabled), [href], [tabindex="0"]'
    );
    (first ?? this.node).focus();
  }

  handleEvent(event: Event): void {
    switch (event.type) {
      case 'keydown': {
        const key = event as KeyboardEvent;
        if (key.key === 'Escape') {
          key.preventDefault();
          key.stopPropagation();
          this.close(true);
        }
        break;
      }
      case 'mousedown': {
        const target = event.target as Node | null;
        if (target && !this.node.contains(target) && !this._anchor.contains(target)) {
          this.close(false);
        }
        break;
      }
      case 'focusout': {
        const next = (event as FocusEvent).relatedTarget as Node | null;
        // Focus moving to another part of the page (Tab out, or a click elsewhere).
        if (next && !this.node.contains(next) && !this._anchor.contains(next)) {
          this.close(false);
        }
        break;
      }
      case 'resize':
        this.place();
        break;
    }
  }

  /** Keep it next to its anchor, inside the window. */
  place(): void {
    if (this.isDisposed || !this.isAttached) {
      return;
    }
    const anchor = this._anchor.getBoundingClientRect();
    const node = this.node;
    const margin = 4;
    const room =
      this._placement === 'above'
        ? anchor.top - 2 * margin
        : window.innerHeight - anchor.bottom - 2 * margin;
    node.style.maxHeight = `${Math.max(room, 120)}px`;
    const width = node.offsetWidth;
    const height = node.offsetHeight;
    const left = Math.max(margin, Math.min(anchor.left, window.innerWidth - width - margin));
    const top =
      this._placement === 'above'
        ? Math.max(margin, anchor.top - height - margin)
        : Math.min(anchor.bottom + margin, window.innerHeight - height - margin);
    node.style.left = `${left}px`;
    node.style.top = `${Math.max(margin, top)}px`;
  }

  private _restoreFocus(): void {
    const back = this._returnTo;
    const usable =
      back !== null &&
      back.isConnected &&
      back !== document.body &&
      !this.node.contains(back) &&
      back.closest('.lm-CommandPalette, .jp-ModalCommandPalette') === null &&
      back.getClientRects().length > 0;
    const target = usable ? back : this._anchor;
    target.focus();
    // A roving-tabindex toolbar (Notebook 7's <jp-toolbar>) sends focus that comes from
    // outside it on to its active item, which need not be ours. Focus coming from inside
    // the toolbar stays where it is sent, so a second call lands on the target.
    const toolbar = target.closest('jp-toolbar, [role="toolbar"]');
    if (document.activeElement !== target && toolbar?.contains(document.activeElement)) {
      target.focus();
    }
  }

  private _resizer: ResizeObserver;
  private _returnTo: HTMLElement | null = null;
}

/**
 * Resolve once the focus has stayed on one element for two animation frames (at most
 * `maxFrames`): widgets hand the focus on through posted messages, one frame a hop.
 */
export async function focusSettled(maxFrames = 12): Promise<void> {
  const frame = () => new Promise<void>(resolve => requestAnimationFrame(() => resolve()));
  let last = document.activeElement;
  let stable = 0;
  for (let i = 0; i < maxFrames && stable < 2; i++) {
    await frame();
    stable = document.activeElement === last ? stable + 1 : 0;
    last = document.activeElement;
  }
}
