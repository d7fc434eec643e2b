// A time-series chart (uPlot: small, fast, canvas): one line per series, a legend that
// follows the cursor, sized to its container, coloured from the page's theme.

import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const PALETTE = ['#2f6fdb', '#d9480f', '#2b8a3e', '#ae3ec9', '#e8590c', '#1098ad', '#c2255c', '#5c940d', '#7048e8', '#868e96'];

function useDark() {
  const q = matchMedia('(prefers-color-scheme: dark)');
  const [dark, setDark] = useState(q.matches);
  useEffect(() => {
    const on = () => setDark(q.matches);
    q.addEventListener('change', on);
    return () => q.removeEventListener('change', on);
  }, []);
  return dark;
}

/**
 * `times`: bucket starts in unix ms; `series`: [{name, values}] with one value per
 * bucket; `format`: how a value reads on the axis and in the legend.
 */
export function Chart({ times, series, format, label, height = 280 }) {
  const box = useRef(null);
  const dark = useDark();
  useEffect(() => {
    const el = box.current;
    if (!el) return undefined;
    const css = getComputedStyle(document.documentElement);
    const ink = css.getPropertyValue('--muted').trim() || '#666';
    const grid = css.getPropertyValue('--line').trim() || '#ddd';
    const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const opts = {
      width: Math.max(240, el.clientWidth),
      height,
      scales: { x: { time: true } },
      series: [
        { label: 'Time' },
        ...series.map((s, i) => ({
          label: s.name,
          stroke: PALETTE[i % PALETTE.length],
          width: 2,
          points: { show: true, size: 5 },
          value: (_, v) => (v === null || v === undefined ? '—' : format(v)),
        })),
      ],
      axes: [axis, { ...axis, size: 72, values: (_, vals) => vals.map(format) }],
      legend: { live: true },
    };
    const data = [times.map((t) => t / 1000), ...series.map((s) => s.values)];
    const plot = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(240, el.clientWidth), height }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [times, series, dark, height]);
  return <div class="chart" ref={box} role="img" aria-label={label} />;
}
