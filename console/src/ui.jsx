// Small pieces every page uses: errors in words, dialogs, badges, usage bars, and a hook
// that loads from the admin API and keeps the error.

import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { share } from './format.js';

/** An admin API error as a sentence, with its status and the parameter it names. */
export function ErrorBox({ error, title }) {
  if (!error) return null;
  const status = error.status ? `HTTP ${error.status}` : 'No answer';
  return (
    <div class="error" role="alert">
      <strong>{title || 'Something went wrong'}</strong>
      <p>{error.message}</p>
      <p class="muted small">
        {status}
        {error.param ? ` · parameter: ${error.param}` : ''}
        {error.code ? ` · code: ${error.code}` : ''}
      </p>
    </div>
  );
}

export function Dialog({ title, onClose, children, label }) {
  const box = useRef(null);
  useEffect(() => {
    const prev = document.activeElement;
    const first = box.current && box.current.querySelector('input, select, textarea, button');
    if (first) first.focus();
    const esc = (e) => e.key === 'Escape' && onClose && onClose();
    document.addEventListener('keydown', esc);
    return () => {
      document.removeEventListener('keydown', esc);
      if (prev && prev.focus) prev.focus();
    };
  }, []);
  return (
    <div class="overlay" onClick={(e) => e.target === e.currentTarget && onClose && onClose()}>
      <div class="dialog" role="dialog" aria-modal="true" aria-label={label || title} ref={box}>
        <header>
          <h2>{title}</h2>
          {onClose && (
            <button class="ghost" aria-label="Close" onClick={onClose}>
              ✕
            </button>
          )}
        </header>
        {children}
      </div>
    </div>
  );
}

export const Badge = ({ kind, title, children }) => (
  <span class={`badge ${kind || ''}`} title={title}>
    {children}
  </span>
);

/** How much of a limit is used, as a bar: a <meter>, styled by the stylesheet alone. */
export function UsageBar({ used, limit }) {
  const s = share(used, limit);
  return <meter class="usage" min="0" max="1" low="0.75" high="0.9" optimum="0" value={s} title={`${Math.round(s * 100)}% used`} />;
}

/** Loads `load()` now and whenever `deps` change; `reload` loads again. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const seq = useRef(0);
  const run = useCallback(() => {
    const mine = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => mine === seq.current && setState({ data, error: null, loading: false }),
      (error) => mine === seq.current && setState((s) => ({ data: s.data, error, loading: false })),
    );
  }, deps);
  useEffect(run, [run]);
  return { ...state, reload: run };
}

export function Empty({ children }) {
  return <p class="empty muted">{children}</p>;
}
