import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError } from '../api'
import { ErrorBox, lazy, message } from '../ui'

type Row = Record<string, unknown>

/** cellText is what a grid shows for a value the API returned (its JSON: strings without quotes). */
export function cellText(v: unknown): string {
  if (v === null || v === undefined) return ''
  if (typeof v === 'string') return v
  return JSON.stringify(v)
}

/** Cell shows a value; NULL is marked as such, not shown as an empty string. */
function Cell({ v }: { v: unknown }) {
  if (v === null || v === undefined) return <span class="null">NULL</span>
  return <>{cellText(v)}</>
}

const ROW_H = 28
const VIEW_H = 440

/**
 * ResultGrid shows rows in a scrolling grid that renders only the rows in view (plus a margin), so 10,000
 * rows scroll as smoothly as 10.
 */
export function ResultGrid({ columns, types, rows, label }: { columns: string[]; types: string[]; rows: Row[]; label: string }) {
  const [top, setTop] = useState(0)
  const scroller = useRef<HTMLDivElement>(null)
  useEffect(() => {
    setTop(0)
    if (scroller.current) scroller.current.scrollTop = 0
  }, [rows])
  // Column widths from the header and the first rows (characters, bounded), so the grid does not jump.
  const widths = columns.map((c, i) => {
    let n = c.length + (types[i] || '').length + 1
    for (const r of rows.slice(0, 200)) n = Math.max(n, Math.min(cellText(r[c]).length, 40))
    return Math.min(Math.max(n, 4), 40) * 8 + 24
  })
  const template = widths.map((w) => w + 'px').join(' ')
  const first = Math.max(0, Math.floor(top / ROW_H) - 8)
  const last = Math.min(rows.length, Math.ceil((top + VIEW_H) / ROW_H) + 8)
  return (
    <div
      class="grid-scroll"
      ref={scroller}
      style={{ maxHeight: VIEW_H + ROW_H + 'px' }}
      onScroll={(e) => setTop((e.currentTarget as HTMLDivElement).scrollTop)}
      tabIndex={0}
      role="region"
      aria-label={label}
    >
      <div role="table" aria-label={label} aria-rowcount={rows.length + 1} class="grid" style={{ width: widths.reduce((a, b) => a + b, 0) + 'px' }}>
        <div role="rowgroup" class="grid-head">
          <div role="row" aria-rowindex={1} class="grid-row" style={{ gridTemplateColumns: template }}>
            {columns.map((c, i) => (
              <div role="columnheader" class="grid-cell" title={types[i]}>
                {c} <span class="coltype">{types[i]}</span>
              </div>
            ))}
          </div>
        </div>
        <div role="rowgroup" class="grid-body" style={{ height: rows.length * ROW_H + 'px' }}>
          {rows.slice(first, last).map((r, k) => {
            const i = first + k
            return (
              <div role="row" aria-rowindex={i + 2} class="grid-row" key={i} style={{ top: i * ROW_H + 'px', gridTemplateColumns: template }}>
                {columns.map((c) => (
                  <div role="cell" class="grid-cell" title={cellText(r[c])}>
                    <Cell v={r[c]} />
                  </div>
                ))}
              </div>
            )
          })}
        </div>
      </div>
    </div>
  )
}

/** SQLError shows a SQL error as psql does: the message, its SQLSTATE, and the line it points at with a caret. */
export function SQLError({ error, query }: { error: unknown; query: string }) {
  if (!error) return null
  if (!(error instanceof ApiError) || !error.body.sqlstate) return <ErrorBox error={message(error)} />
  const b = error.body as { sqlstate: string; position?: number; detail?: string; hint?: string }
  let pointer = ''
  if (b.position) {
    const chars = Array.from(query)
    const before = chars.slice(0, b.position - 1).join('')
    const lineStart = before.lastIndexOf('\n') + 1
    const lineNo = before.split('\n').length
    const line = (before.slice(lineStart) + chars.slice(b.position - 1).join('')).split('\n')[0]
    const prefix = `LINE ${lineNo}: `
    pointer = prefix + line + '\n' + ' '.repeat(prefix.length + Array.from(before.slice(lineStart)).length) + '^'
  }
  return (
    <div class="error" role="alert">
      {error.message} <span class="sqlstate">SQLSTATE {b.sqlstate}</span>
      {pointer && <pre class="caret">{pointer}</pre>}
      {b.detail && <div>Detail: {b.detail}</div>}
      {b.hint && <div>Hint: {b.hint}</div>}
    </div>
  )
}

/** The table editor is a chunk of its own (tableeditor.tsx), fetched when the Tables tab first shows. */
export const TablesTab = lazy(() => import('./tableeditor').then((m) => m.TablesTab))
