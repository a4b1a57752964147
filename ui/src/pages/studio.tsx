import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, del, get, patch, post, seg, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, message, plural, useLoad, when } from '../ui'

type SQLResult = Schemas['SQLResult']
type HistoryEntry = Schemas['SQLHistoryEntry']
type TableEntry = Schemas['TableEntry']
type Column = Schemas['Column']
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

/** fromInput turns what a person typed for a column into the value the API binds: an empty field is NULL,
 * a JSON array typed for an array column is that array, anything else the text (the server parses it). */
function fromInput(text: string, col: Column): unknown {
  if (text === '') return null
  if (col.data_type.endsWith('[]')) {
    try {
      const v = JSON.parse(text)
      if (Array.isArray(v)) return v
    } catch {
      /* the server reads array text such as {a,b} too */
    }
  }
  return text
}

const PAGE = 50

/** The table browser: pick a table, page through its rows, edit a row in place, insert one, delete one. */
export function TablesTab({ id, path, active }: { id: string; path: string; active: boolean }) {
  const tables = useLoad(() => (active ? get<{ tables: TableEntry[] }>(path + '/tables') : Promise.resolve({ tables: [] })), [id, active])
  const [picked, setPicked] = useState('')
  useEffect(() => {
    const first = tables.data?.tables.find((t) => t.type === 'table' || t.type === 'partitioned table') ?? tables.data?.tables[0]
    // an update of the latest state: a table picked before this effect ran stays picked
    if (first) setPicked((p) => p || first.schema + '.' + first.table)
  }, [tables.data])
  const entry = tables.data?.tables.find((t) => t.schema + '.' + t.table === picked)
  // The tables (those the grid can write) first, the views apart.
  const all = tables.data?.tables ?? []
  const isTable = (t: TableEntry) => t.type === 'table' || t.type === 'partitioned table'
  const groups: [string, TableEntry[]][] = [
    ['Tables', all.filter(isTable)],
    ['Views and other relations', all.filter((t) => !isTable(t))],
  ]
  return (
    <section class="card">
      <h2>Tables</h2>
      <ErrorBox error={tables.error} />
      {!active && <p class="hint">The project must be active.</p>}
      {tables.data && tables.data.tables.length === 0 && active && <Empty>No tables yet. Create one in the SQL tab.</Empty>}
      {tables.data && tables.data.tables.length > 0 && (
        <>
          <label for="studio-table">Table</label>
          <select id="studio-table" value={picked} onChange={(e) => setPicked((e.target as HTMLSelectElement).value)}>
            {groups.map(([name, list]) =>
              list.length > 0 && (
                <optgroup label={name}>
                  {list.map((t) => (
                    <option value={t.schema + '.' + t.table}>
                      {t.schema}.{t.table}
                      {t.type !== 'table' && t.type !== 'view' ? ` (${t.type})` : ''}
                    </option>
                  ))}
                </optgroup>
              ),
            )}
          </select>
        </>
      )}
      {entry && <TableRows key={picked} base={`${path}/tables/${seg(entry.schema)}/${seg(entry.table)}`} entry={entry} />}
    </section>
  )
}

function TableRows({ base, entry }: { base: string; entry: TableEntry }) {
  const [offset, setOffset] = useState(0)
  const cols = useLoad(() => get<{ columns: Column[] }>(base + '/columns'), [base])
  const rows = useLoad(() => get<{ result: { columns: string[]; rows: Row[] } }>(`${base}/rows?limit=${PAGE}&offset=${offset}`), [base, offset])
  const [editing, setEditing] = useState<number | null>(null)
  const [draft, setDraft] = useState<Record<string, string>>({})
  const [inserting, setInserting] = useState(false)
  const [error, setError] = useState('')
  const columns = cols.data?.columns ?? []
  const pk = columns.filter((c) => c.is_primary_key)
  const writable = entry.type === 'table' || entry.type === 'partitioned table'
  const editable = writable && pk.length > 0
  const act = async (f: () => Promise<unknown>) => {
    setError('')
    try {
      await f()
      setEditing(null)
      setInserting(false)
      setDraft({})
      await rows.reload()
    } catch (e) {
      setError(message(e))
    }
  }
  const match = (r: Row) => Object.fromEntries(pk.map((c) => [c.name, r[c.name]]))
  const list = rows.data?.result.rows ?? []
  const label = (r: Row, i: number) => (pk.length ? pk.map((c) => cellText(r[c.name])).join(', ') : String(offset + i + 1))
  const cancel = () => {
    setEditing(null)
    setDraft({})
    setError('') // an error of the edit goes with it
  }
  // save sends the fields changed, and nothing (no request) when none is.
  const save = (r: Row) => {
    const set = Object.fromEntries(
      Object.entries(draft)
        .filter(([c, v]) => v !== cellText(r[c]))
        .map(([c, v]) => [c, fromInput(v, columns.find((x) => x.name === c)!)]),
    )
    if (Object.keys(set).length === 0) return cancel()
    act(() => patch(base + '/rows', { match: match(r), set }))
  }
  // Editing a row puts the focus in its first field, where Enter saves and Escape cancels.
  const editRow = useRef<HTMLTableRowElement>(null)
  useEffect(() => {
    if (editing !== null) editRow.current?.querySelector('input')?.focus()
  }, [editing])
  const keys = (r: Row) => (e: KeyboardEvent) => {
    if (e.key === 'Escape') {
      e.preventDefault()
      cancel()
    } else if (e.key === 'Enter') {
      e.preventDefault()
      save(r)
    }
  }
  return (
    <>
      <ErrorBox error={cols.error || rows.error || error} />
      {writable && !editable && <p class="hint">This table has no primary key: insert rows here, change or delete them with SQL.</p>}
      {writable && (
        <div class="actions">
          <button onClick={() => (setInserting(!inserting), setDraft({}))} aria-expanded={inserting}>
            Insert row
          </button>
        </div>
      )}
      {inserting && (
        <form
          class="card insert-row"
          aria-label="New row"
          onSubmit={(e) => {
            e.preventDefault()
            const row = Object.fromEntries(
              columns.filter((c) => (draft[c.name] ?? '') !== '').map((c) => [c.name, fromInput(draft[c.name], c)]),
            )
            act(() => post(base + '/rows', { rows: [row] }))
          }}
        >
          <p class="hint">A field left empty gets the column's default.</p>
          <div class="row">
            {columns.map((c) => (
              <div>
                <label for={'new-' + c.name}>
                  {c.name} <span class="coltype">{c.data_type}</span>
                </label>
                <input
                  id={'new-' + c.name}
                  placeholder={c.default ?? (c.is_nullable ? 'NULL' : '')}
                  value={draft[c.name] ?? ''}
                  onInput={(e) => setDraft({ ...draft, [c.name]: (e.target as HTMLInputElement).value })}
                />
              </div>
            ))}
          </div>
          <div class="actions">
            <button type="submit" class="primary">
              Save new row
            </button>
            <button type="button" onClick={() => setInserting(false)}>
              Cancel
            </button>
          </div>
        </form>
      )}
      {rows.data && list.length === 0 && <Empty>{offset ? 'No more rows.' : 'No rows.'}</Empty>}
      {rows.data && list.length > 0 && (
        <div class="table-scroll">
          <table class="rows">
            <thead>
              <tr>
                {rows.data.result.columns.map((c) => (
                  <th scope="col">{c}</th>
                ))}
                {editable && (
                  <th scope="col">
                    <span class="visually-hidden">Actions</span>
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {list.map((r, i) => (
                <tr key={offset + i} ref={editing === i ? editRow : undefined}>
                  {rows.data!.result.columns.map((c) => {
                    const col = columns.find((x) => x.name === c)
                    // The primary key identifies the row: it is not edited in place (SQL can change it).
                    if (editing === i && col && !col.is_primary_key) {
                      return (
                        <td>
                          <input
                            aria-label={`${c} of row ${label(r, i)}`}
                            value={draft[c] ?? cellText(r[c])}
                            placeholder="NULL"
                            onInput={(e) => setDraft({ ...draft, [c]: (e.target as HTMLInputElement).value })}
                            onKeyDown={keys(r)}
                          />
                        </td>
                      )
                    }
                    return (
                      <td title={cellText(r[c])}>
                        <Cell v={r[c]} />
                      </td>
                    )
                  })}
                  {editable && (
                    <td class="actions-cell">
                      <div class="cell-actions">
                      {editing === i ? (
                        <>
                          <button class="primary" key="save" onClick={() => save(r)}>
                            Save
                          </button>
                          <button key="cancel" onClick={cancel}>Cancel</button>
                        </>
                      ) : (
                        <>
                          <button key="edit" aria-label={'Edit row ' + label(r, i)} onClick={() => (setEditing(i), setDraft({}), setError(''))}>
                            Edit
                          </button>
                          <button
                            key="delete"
                            class="danger-outline"
                            aria-label={'Delete row ' + label(r, i)}
                            onClick={() => confirm(`Delete the row ${label(r, i)}? There is no undo.`) && act(() => del(base + '/rows', { match: match(r) }))}
                          >
                            Delete
                          </button>
                        </>
                      )}
                      </div>
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {editing !== null && <p class="hint">Enter saves, Escape cancels. An emptied field is saved as NULL; for an array column type a JSON array. The primary key is changed with SQL.</p>}
      <div class="actions pager">
        <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>
          Previous
        </button>
        <span class="hint">
          Rows {list.length ? offset + 1 : offset}–{offset + list.length}
        </span>
        <button disabled={list.length < PAGE} onClick={() => setOffset(offset + PAGE)}>
          Next
        </button>
      </div>
    </>
  )
}
