import { useEffect, useRef, useState } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'

// Time-series charts drawn by uPlot (a small canvas charting library; its styles are set through the
// CSSOM, which the dashboard's CSP allows). Times are the viewer's local time.

/** A line of a chart: its values at the chart's times (null: no sample there, the line breaks). */
export type Line = {
  label: string
  values: (number | null)[]
  /** limit draws the line dashed in the alert colour (a plan's limit, a quota). */
  limit?: boolean
  /** right puts the line on a second axis at the right, with its own unit (format2). */
  right?: boolean
}

/** A unit of a chart's values: how a value reads, and optionally the axis' steps and range. */
export type Unit = {
  format: (v: number) => string
  incrs?: number[]
  /** range of the axis from the data's; default from 0 to a little above the highest value. */
  range?: (min: number, max: number) => [number, number]
}

const fromZero = (_min: number, max: number): [number, number] => [0, max > 0 ? max * 1.1 : 1]

/** useColorScheme is the system's colour scheme, which the page's colours follow (charts redraw with it). */
function useColorScheme(): boolean {
  const q = matchMedia('(prefers-color-scheme: dark)')
  const [dark, setDark] = useState(q.matches)
  useEffect(() => {
    const f = () => setDark(q.matches)
    q.addEventListener('change', f)
    return () => q.removeEventListener('change', f)
  }, [])
  return dark
}

const HEIGHT = 200

/**
 * TimeChart draws lines over time (times in Unix seconds, oldest first) at the width of its container,
 * with a legend that shows the values under the cursor; summary is its text for screen readers.
 */
export function TimeChart({ title, times, lines, unit, unit2, summary, bands }: {
  title: string
  times: number[]
  lines: Line[]
  unit: Unit
  unit2?: Unit
  summary: string
  /** bands are periods (Unix seconds, from and to) shaded behind the lines: a project's suspensions. */
  bands?: [number, number][]
}) {
  const box = useRef<HTMLDivElement>(null)
  const dark = useColorScheme()
  useEffect(() => {
    const el = box.current
    if (!el) return
    const css = getComputedStyle(document.documentElement)
    const color = (name: string) => css.getPropertyValue(name).trim()
    const palette = [color('--accent'), color('--good'), color('--warn')]
    const axis = (u: Unit, right: boolean): uPlot.Axis => ({
      scale: right ? 'y2' : 'y',
      side: right ? 1 : 3,
      stroke: color('--muted'),
      grid: { show: !right, stroke: color('--line'), width: 1 },
      ticks: { stroke: color('--line'), width: 1 },
      values: (_u, ticks) => ticks.map((t) => u.format(t)),
      incrs: u.incrs,
      size: (_self, values) => {
        // wide enough for the longest label (uPlot's default width cuts "512 MiB")
        const longest = Math.max(0, ...(values ?? []).map((v) => String(v).length))
        return Math.max(40, Math.ceil(longest * 7.5) + 26)
      },
    })
    // Without a cursor on the chart the legend shows the newest values (uPlot's would show none).
    const latest = (values: (number | null)[]) => {
      for (let i = values.length - 1; i >= 0; i--) if (values[i] != null) return values[i]
      return null
    }
    const scale = (u: Unit): uPlot.Scale => ({ range: (_self, min, max) => (u.range ?? fromZero)(min ?? 0, max ?? 0) })
    let n = 0
    const opts: uPlot.Options = {
      width: Math.max(240, el.clientWidth),
      height: HEIGHT,
      series: [
        {
          label: 'Time',
          value: (_u, v, _i, idx) => {
            const t = idx == null ? times[times.length - 1] : v
            return t == null ? '–' : new Date(t * 1000).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' })
          },
        },
        ...lines.map((l): uPlot.Series => ({
          label: l.label,
          scale: l.right ? 'y2' : 'y',
          stroke: l.limit ? color('--bad') : palette[n++ % palette.length],
          width: l.limit ? 1.5 : 2,
          dash: l.limit ? [6, 4] : undefined,
          value: (_u, v, _i, idx) => {
            const x = idx == null ? latest(l.values) : v
            return x == null ? '–' : (l.right && unit2 ? unit2 : unit).format(x)
          },
          points: { show: times.length < 3, size: 6 },
        })),
      ],
      axes: [
        {
          stroke: color('--muted'),
          grid: { stroke: color('--line'), width: 1 },
          ticks: { stroke: color('--line'), width: 1 },
          space: 64,
          incrs: timeIncrs,
          values: timeTicks,
        },
        axis(unit, false),
        ...(unit2 ? [axis(unit2, true)] : []),
      ],
      scales: { x: { time: true }, y: scale(unit), ...(unit2 ? { y2: scale(unit2) } : {}) },
      cursor: { points: { size: 7 } },
      legend: { live: true },
      hooks: {
        drawClear: [
          (u) => {
            if (!bands?.length) return
            const ctx = u.ctx
            ctx.save()
            ctx.fillStyle = color('--muted')
            ctx.globalAlpha = 0.18
            for (const [from, to] of bands) {
              const x0 = Math.max(u.bbox.left, u.valToPos(from, 'x', true))
              const x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(to, 'x', true))
              if (x1 > x0) ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height)
            }
            ctx.restore()
          },
        ],
      },
    }
    const plot = new uPlot(opts, [times, ...lines.map((l) => l.values)] as uPlot.AlignedData, el)
    const ro = new ResizeObserver(() => {
      if (el.clientWidth > 0 && Math.abs(el.clientWidth - plot.width) > 1) plot.setSize({ width: el.clientWidth, height: HEIGHT })
    })
    ro.observe(el)
    return () => {
      ro.disconnect()
      plot.destroy()
    }
  }, [times, lines, unit, unit2, dark, bands])
  return (
    <figure class="tchart" data-bands={bands?.length ?? 0}>
      <figcaption>{title}</figcaption>
      <div ref={box} class="tchart-plot" role="img" aria-label={title + ': ' + summary} />
    </figure>
  )
}

const m = 60, h = 3600, d = 86400
/** timeIncrs are the time axis' steps (uPlot's jump from 1 to 5 minutes leaves a phone's chart one tick). */
const timeIncrs = [1, 2, 5, 10, 15, 30, m, 2 * m, 5 * m, 10 * m, 15 * m, 30 * m, h, 2 * h, 3 * h, 6 * h, 12 * h, d, 2 * d, 7 * d, 14 * d, 30 * d]

/** timeTicks labels the time axis in the viewer's locale and time zone: the time, and the day under the
 * first tick of each day (over more than 3 days, the day alone at midnight). */
function timeTicks(self: uPlot, splits: number[]): string[] {
  const span = (self.scales.x.max ?? 0) - (self.scales.x.min ?? 0)
  let prevDay = ''
  return splits.map((s) => {
    const d = new Date(s * 1000)
    const day = d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })
    const time = d.toLocaleTimeString(undefined, { hour: 'numeric', minute: '2-digit', ...(d.getSeconds() ? { second: '2-digit' } : {}) })
    const first = day !== prevDay
    prevDay = day
    if (span > 3 * 86400 && d.getHours() === 0 && d.getMinutes() === 0) return day
    return first ? time + '\n' + day : time
  })
}

// Units of the monitoring charts.

/** bytesShort writes a size in binary units without a needless ".0": 0 B, 512 KiB, 1.5 GiB. */
export function bytesShort(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return (Math.round(n * 10) / 10).toString() + ' ' + units[i]
}

/** steps of 1, 2, 5 times a power of 1024, for byte axes (ticks at 256 MiB, 512 MiB, 1 GiB …). */
const binaryIncrs = [0, 1, 2, 3, 4].flatMap((k) => [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].map((m) => m * 1024 ** k))

export const units = {
  bytes: { format: bytesShort, incrs: binaryIncrs } as Unit,
  count: { format: (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(1)), incrs: [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000] } as Unit,
  rate: { format: (v: number) => (v === 0 ? '0' : v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : String(+v.toPrecision(2))) + '/s' } as Unit,
  cores: { format: (v: number) => (v === 0 ? '0' : v >= 10 ? v.toFixed(0) : String(+v.toPrecision(2))) } as Unit,
  ms: { format: (v: number) => (v >= 1000 ? +(v / 1000).toFixed(1) + ' s' : (v === 0 ? '0' : v >= 10 ? v.toFixed(0) : String(+v.toPrecision(2))) + ' ms') } as Unit,
  ratio: {
    format: (v: number) => +(v * 100).toFixed(1) + '%',
    range: (min: number) => [Math.max(0, Math.min(min, 0.9) - 0.02), 1.005],
  } as Unit,
}
