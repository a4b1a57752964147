// The table editor (issue 28 §3.2), a chunk of its own: pick a table; filter its rows per column (the API
// binds the values), sort by a header, see the count and each column's type; edit a row in place or in a
// side panel; follow a foreign key to the referenced row; create a table and add, alter or drop a column
// from forms that show the DDL the API generated before it runs; export the rows as CSV, import a CSV file.
import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, del, get, patch, post, seg, type Schemas } from '../api'
import { Empty, ErrorBox, message, plural, useLoad } from '../ui'
import { cellText } from './studio'

type TableEntry = Schemas['TableEntry']
type Column = Schemas['Column']
type ColumnDef = Schemas['ColumnDef']
type Row = Record<string, unknown>
type Filter = { col: string; op: string; value: string }
type Sort = { col: string; desc: boolean }
type RowsAnswer = { result: { columns: string[]; column_types: string[]; rows: Row[]; total: number; count_is_estimate: boolean } }

const OPS: [string, string][] = [
  ['eq', '='],
  ['neq', '≠'],
  ['lt', '<'],
  ['lte', '≤'],
  ['gt', '>'],
  ['gte', '≥'],
  ['like', 'like'],
  ['ilike', 'ilike'],
  ['in', 'in (a,b,…)'],
  ['is_null', 'is null'],
  ['not_null', 'is not null'],
]
const noValue = (op: string) => op === 'is_null' || op === 'not_null'
const TYPES = ['text', 'integer', 'bigint', 'numeric', 'boolean', 'timestamp with time zone', 'date', 'uuid', 'jsonb', 'text[]', 'double precision', 'character varying(255)']

/** Cell shows a value; NULL is marked as such, not shown as an empty string. */
function Cell({ v }: { v: unknown }) {
  if (v === null || v === undefined) return <span class="null">NULL</span>
  return <>{cellText(v)}</>
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

/** selection is the query string of filters and sort (the API's filter and sort parameters). */
function selection(filters: Filter[], sort: Sort[]): URLSearchParams {
  const q = new URLSearchParams()
  for (const f of filters) q.append('filter', `${f.col}:${f.op}` + (noValue(f.op) ? '' : ':' + f.value))
  for (const s of sort) q.append('sort', (s.desc ? '-' : '') + s.col)
  return q
}

/** filename is the download's name from its Content-Disposition (the API's), else a default. */
function filename(res: Response, fallback: string): string {
  const m = /filename="?([^";]+)"?/.exec(res.headers.get('Content-Disposition') ?? '')
  return m ? m[1] : fallback
}

/** sendRaw posts a file as it is (the CSV import), with the CSRF header the API requires. */
async function sendRaw<T>(path: string, body: Blob): Promise<T> {
  const res = await fetch(path, { method: 'POST', headers: { 'X-Appliance-CSRF': '1', 'Content-Type': 'text/csv' }, body, credentials: 'same-origin' })
  const data = await res.json().catch(() => ({}))
  if (!res.ok) throw new ApiError(res.status, data.error || `import: ${res.status}`, data)
  return data as T
}

const PAGE = 50
const num = (n: number) => n.toLocaleString('en-US')

/** The table browser and editor: pick a table, filter, sort and page through its rows, edit them. */
export function TablesTab({ id, path, active }: { id: string; path: string; active: boolean }) {
  const tables = useLoad(() => (active ? get<{ tables: TableEntry[] }>(path + '/tables') : Promise.resolve({ tables: [] })), [id, active])
  // picked is the table shown and the filter it opened with (a followed foreign key's).
  const [picked, setPicked] = useState<{ name: string; filter?: Filter }>({ name: '' })
  const [creating, setCreating] = useState(false)
  useEffect(() => {
    const first = tables.data?.tables.find((t) => t.type === 'table' || t.type === 'partitioned table') ?? tables.data?.tables[0]
    // an update of the latest state: a table picked before this effect ran stays picked
    if (first) setPicked((p) => (p.name ? p : { name: first.schema + '.' + first.table }))
  }, [tables.data])
  const entry = tables.data?.tables.find((t) => t.schema + '.' + t.table === picked.name)
  // The tables (those the grid can write) first, the views apart.
  const all = tables.data?.tables ?? []
  const isTable = (t: TableEntry) => t.type === 'table' || t.type === 'partitioned table'
  const groups: [string, TableEntry[]][] = [
    ['Tables', all.filter(isTable)],
    ['Views and other relations', all.filter((t) => !isTable(t))],
  ]
  const follow = (ref: Schemas['ColumnRef'], value: unknown) =>
    setPicked({ name: ref.schema + '.' + ref.table, filter: { col: ref.column, op: 'eq', value: cellText(value) } })
  return (
    <section class="card table-editor">
      <div class="card-head">
        <h2>Tables</h2>
        {active && (
          <button onClick={() => setCreating(!creating)} aria-expanded={creating}>
            New table
          </button>
        )}
      </div>
      <ErrorBox error={tables.error} />
      {!active && <p class="hint">The project must be active.</p>}
      {creating && (
        <NewTable
          path={path}
          onDone={async (schema, name) => {
            setCreating(false)
            await tables.reload()
            setPicked({ name: schema + '.' + name })
          }}
        />
      )}
      {tables.data && tables.data.tables.length === 0 && active && <Empty>No tables yet: create one with New table, or in the SQL tab.</Empty>}
      {tables.data && tables.data.tables.length > 0 && (
        <>
          <label for="studio-table">Table</label>
          <select id="studio-table" value={picked.name} onChange={(e) => setPicked({ name: (e.target as HTMLSelectElement).value })}>
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
      {entry && (
        <TableRows
          key={picked.name + JSON.stringify(picked.filter ?? null)}
          base={`${path}/tables/${seg(entry.schema)}/${seg(entry.table)}`}
          entry={entry}
          initial={picked.filter}
          onFollow={follow}
          onSchema={() => tables.reload()}
        />
      )}
    </section>
  )
}

function TableRows({ base, entry, initial, onFollow, onSchema }: {
  base: string
  entry: TableEntry
  initial?: Filter
  onFollow: (ref: Schemas['ColumnRef'], value: unknown) => void
  onSchema: () => void
}) {
  const [offset, setOffset] = useState(0)
  const [filters, setFilters] = useState<Filter[]>(initial ? [initial] : [])
  const [sort, setSort] = useState<Sort[]>([])
  const cols = useLoad(() => get<{ columns: Column[] }>(base + '/columns'), [base])
  const query = selection(filters, sort)
  const rows = useLoad(() => get<RowsAnswer>(`${base}/rows?limit=${PAGE}&offset=${offset}&${query.toString()}`), [base, offset, query.toString()])
  const [editing, setEditing] = useState<number | null>(null)
  const [draft, setDraft] = useState<Record<string, string>>({})
  const [inserting, setInserting] = useState(false)
  const [panel, setPanel] = useState<number | null>(null)
  const [schemaOpen, setSchemaOpen] = useState(false)
  const [error, setError] = useState('')
  const [note, setNote] = useState('')
  const columns = cols.data?.columns ?? []
  const byName = (c: string) => columns.find((x) => x.name === c)
  const pk = columns.filter((c) => c.is_primary_key)
  const writable = entry.type === 'table' || entry.type === 'partitioned table'
  const editable = writable && pk.length > 0
  const act = async (f: () => Promise<unknown>) => {
    setError('')
    try {
      await f()
      setEditing(null)
      setPanel(null)
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
    setPanel(null)
    setDraft({})
    setError('') // an error of the edit goes with it
  }
  // save sends the fields changed, and nothing (no request) when none is.
  const save = (r: Row) => {
    const set = Object.fromEntries(
      Object.entries(draft)
        .filter(([c, v]) => v !== cellText(r[c]))
        .map(([c, v]) => [c, fromInput(v, byName(c)!)]),
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
  // A header click sorts by its column: ascending, then descending, then not.
  const sortBy = (c: string) => {
    const cur = sort.find((s) => s.col === c)
    setOffset(0)
    setSort(!cur ? [{ col: c, desc: false }] : !cur.desc ? [{ col: c, desc: true }] : [])
  }
  const download = async () => {
    setError('')
    try {
      const res = await fetch(base + '/csv?' + query.toString(), { headers: { 'X-Appliance-CSRF': '1' }, credentials: 'same-origin' })
      if (!res.ok) {
        const body = await res.json().catch(() => ({}))
        throw new ApiError(res.status, body.error || `export: ${res.status}`)
      }
      const url = URL.createObjectURL(await res.blob())
      const a = document.createElement('a')
      a.href = url
      a.download = filename(res, entry.table + '.csv')
      document.body.appendChild(a)
      a.click()
      a.remove()
      setTimeout(() => URL.revokeObjectURL(url), 10000)
    } catch (e) {
      setError(message(e))
    }
  }
  const importFile = async (input: HTMLInputElement) => {
    const file = input.files?.[0]
    if (!file) return
    setError('')
    setNote('')
    try {
      const res = await sendRaw<{ rows_imported: number }>(base + '/csv', file)
      setNote(`Imported ${plural(res.rows_imported, 'row')} from ${file.name}.`)
      await rows.reload()
    } catch (e) {
      setError(message(e))
    } finally {
      input.value = ''
    }
  }
  const fk = (c: string, v: unknown) => {
    const ref = byName(c)?.foreign_key
    if (!ref || v === null || v === undefined) return null
    return (
      <a
        href="#"
        class="fk"
        title={`Open ${ref.schema}.${ref.table} where ${ref.column} = ${cellText(v)}`}
        onClick={(e) => {
          e.preventDefault()
          onFollow(ref, v)
        }}
      >
        {cellText(v)}
      </a>
    )
  }
  const res = rows.data?.result
  const shown = res?.columns ?? columns.map((c) => c.name)
  const opened = panel !== null ? list[panel] : undefined
  return (
    <>
      <ErrorBox error={cols.error || rows.error || error} />
      {note && <p class="hint" role="status">{note}</p>}
      <FilterBar columns={columns} filters={filters} onChange={(f) => (setOffset(0), setFilters(f))} />
      <div class="actions editor-actions">
        {writable && (
          <button onClick={() => (setInserting(!inserting), setDraft({}))} aria-expanded={inserting}>
            Insert row
          </button>
        )}
        {writable && (
          <button onClick={() => setSchemaOpen(!schemaOpen)} aria-expanded={schemaOpen}>
            Columns
          </button>
        )}
        <button onClick={download}>Export CSV</button>
        {writable && (
          <label class="button file-button">
            Import CSV
            <input type="file" accept=".csv,text/csv" onChange={(e) => importFile(e.target as HTMLInputElement)} />
          </label>
        )}
      </div>
      {writable && !editable && <p class="hint">This table has no primary key: insert rows here, change or delete them with SQL.</p>}
      {schemaOpen && (
        <ColumnsEditor
          base={base}
          columns={columns}
          onDone={async () => {
            await cols.reload()
            await rows.reload()
            onSchema()
          }}
        />
      )}
      {inserting && (
        <form
          class="card insert-row"
          aria-label="New row"
          onSubmit={(e) => {
            e.preventDefault()
            const row = Object.fromEntries(columns.filter((c) => (draft[c.name] ?? '') !== '').map((c) => [c.name, fromInput(draft[c.name], c)]))
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
      <p class="hint" role="status" aria-label="Row count">
        {res ? `${res.count_is_estimate ? 'about ' : ''}${num(res.total)} ${res.total === 1 ? 'row' : 'rows'}${filters.length ? ' match' + (res.total === 1 ? 'es' : '') + ' the filters' : ''}` : ''}
      </p>
      {rows.data && list.length === 0 && <Empty>{offset ? 'No more rows.' : filters.length ? 'No row matches the filters.' : 'No rows.'}</Empty>}
      {rows.data && list.length > 0 && (
        <div class="table-scroll">
          <table class="rows">
            <thead>
              <tr>
                {shown.map((c, i) => {
                  const s = sort.find((x) => x.col === c)
                  return (
                    <th scope="col" aria-sort={s ? (s.desc ? 'descending' : 'ascending') : undefined}>
                      <button class="sort" onClick={() => sortBy(c)} title={`Sort by ${c}`}>
                        {c}
                        <span aria-hidden="true">{s ? (s.desc ? ' ↓' : ' ↑') : ''}</span>
                      </button>
                      <span class="coltype">{byName(c)?.data_type ?? res?.column_types[i]}</span>
                    </th>
                  )
                })}
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.map((r, i) => (
                <tr key={offset + i} ref={editing === i ? editRow : undefined}>
                  {shown.map((c) => {
                    const col = byName(c)
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
                    return <td title={cellText(r[c])}>{fk(c, r[c]) ?? <Cell v={r[c]} />}</td>
                  })}
                  <td class="actions-cell">
                    <div class="cell-actions">
                      {editing === i ? (
                        <>
                          <button class="primary" key="save" onClick={() => save(r)}>
                            Save
                          </button>
                          <button key="cancel" onClick={cancel}>
                            Cancel
                          </button>
                        </>
                      ) : (
                        <>
                          <button key="open" aria-label={'Open row ' + label(r, i)} onClick={() => (cancel(), setPanel(i))}>
                            Open
                          </button>
                          {editable && (
                            <button key="edit" aria-label={'Edit row ' + label(r, i)} onClick={() => (setPanel(null), setEditing(i), setDraft({}), setError(''))}>
                              Edit
                            </button>
                          )}
                          {editable && (
                            <button
                              key="delete"
                              class="danger-outline"
                              aria-label={'Delete row ' + label(r, i)}
                              onClick={() => confirm(`Delete the row ${label(r, i)}? There is no undo.`) && act(() => del(base + '/rows', { match: match(r) }))}
                            >
                              Delete
                            </button>
                          )}
                        </>
                      )}
                    </div>
                  </td>
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
          {res ? ` of ${res.count_is_estimate ? 'about ' : ''}${num(res.total)}` : ''}
        </span>
        <button disabled={list.length < PAGE} onClick={() => setOffset(offset + PAGE)}>
          Next
        </button>
      </div>
      {opened && (
        <RowPanel
          key={panel}
          row={opened}
          columns={shown.map((c) => byName(c) ?? { name: c, data_type: '', default: null, is_nullable: true, is_primary_key: false, position: 0, foreign_key: null })}
          title={'Row ' + label(opened, panel!)}
          editable={editable}
          draft={draft}
          setDraft={setDraft}
          onSave={() => save(opened)}
          onCancel={cancel}
          onFollow={onFollow}
        />
      )}
    </>
  )
}

/** RowPanel shows one row whole at the side, each column editable (not the primary key); Escape cancels. */
function RowPanel({ row, columns, title, editable, draft, setDraft, onSave, onCancel, onFollow }: {
  row: Row
  columns: Column[]
  title: string
  editable: boolean
  draft: Record<string, string>
  setDraft: (d: Record<string, string>) => void
  onSave: () => void
  onCancel: () => void
  onFollow: (ref: Schemas['ColumnRef'], value: unknown) => void
}) {
  const ref = useRef<HTMLElement>(null)
  useEffect(() => {
    const el = ref.current
    ;(el?.querySelector<HTMLElement>('input:not([readonly])') ?? el?.querySelector<HTMLElement>('button'))?.focus()
  }, [])
  return (
    <aside
      class="row-panel"
      role="dialog"
      aria-label={title}
      ref={ref}
      onKeyDown={(e) => {
        if (e.key === 'Escape') {
          e.preventDefault()
          onCancel()
        }
      }}
    >
      <div class="card-head">
        <h3>{title}</h3>
        <button onClick={onCancel} aria-label="Close the row">
          ✕
        </button>
      </div>
      <form
        onSubmit={(e) => {
          e.preventDefault()
          onSave()
        }}
      >
        {columns.map((c) => (
          <div class="panel-field">
            <label for={'panel-' + c.name}>
              {c.name} <span class="coltype">{c.data_type}</span>
              {c.is_primary_key && <span class="coltype"> primary key</span>}
            </label>
            <input
              id={'panel-' + c.name}
              value={draft[c.name] ?? cellText(row[c.name])}
              placeholder="NULL"
              readOnly={!editable || c.is_primary_key}
              onInput={(e) => setDraft({ ...draft, [c.name]: (e.target as HTMLInputElement).value })}
            />
            {c.foreign_key && row[c.name] !== null && row[c.name] !== undefined && (
              <a
                href="#"
                class="fk"
                onClick={(e) => {
                  e.preventDefault()
                  onFollow(c.foreign_key!, row[c.name])
                }}
              >
                Open {c.foreign_key.schema}.{c.foreign_key.table} where {c.foreign_key.column} = {cellText(row[c.name])}
              </a>
            )}
          </div>
        ))}
        <div class="actions">
          {editable && (
            <button type="submit" class="primary">
              Save
            </button>
          )}
          <button type="button" onClick={onCancel}>
            Cancel
          </button>
        </div>
        {editable && <p class="hint">An emptied field is saved as NULL. Escape cancels.</p>}
      </form>
    </aside>
  )
}

/** FilterBar edits the filters: one line each (column, operator, value), applied by Apply. */
function FilterBar({ columns, filters, onChange }: { columns: Column[]; filters: Filter[]; onChange: (f: Filter[]) => void }) {
  const [rows, setRows] = useState<Filter[]>(filters)
  useEffect(() => setRows(filters), [filters])
  const set = (i: number, k: keyof Filter, v: string) => setRows(rows.map((r, j) => (j === i ? { ...r, [k]: v } : r)))
  if (columns.length === 0) return null
  return (
    <form
      class="filter-bar"
      aria-label="Filters"
      onSubmit={(e) => {
        e.preventDefault()
        onChange(rows)
      }}
    >
      {rows.map((f, i) => (
        <div class="filter-row">
          <select aria-label={`Filter ${i + 1} column`} value={f.col} onChange={(e) => set(i, 'col', (e.target as HTMLSelectElement).value)}>
            {columns.map((c) => (
              <option value={c.name}>{c.name}</option>
            ))}
          </select>
          <select aria-label={`Filter ${i + 1} operator`} value={f.op} onChange={(e) => set(i, 'op', (e.target as HTMLSelectElement).value)}>
            {OPS.map(([op, text]) => (
              <option value={op}>{text}</option>
            ))}
          </select>
          {!noValue(f.op) && <input aria-label={`Filter ${i + 1} value`} value={f.value} onInput={(e) => set(i, 'value', (e.target as HTMLInputElement).value)} />}
          <button type="button" aria-label={`Remove filter ${i + 1}`} onClick={() => setRows(rows.filter((_, j) => j !== i))}>
            ✕
          </button>
        </div>
      ))}
      <div class="actions">
        <button type="button" onClick={() => setRows([...rows, { col: columns[0].name, op: 'eq', value: '' }])}>
          Add filter
        </button>
        {(rows.length > 0 || filters.length > 0) && (
          <button type="submit" class="primary">
            Apply filters
          </button>
        )}
        {filters.length > 0 && (
          <button type="button" onClick={() => onChange([])}>
            Clear filters
          </button>
        )}
      </div>
    </form>
  )
}

/** DDLAction previews a schema change (the API's dry run shows the DDL it generated) and runs exactly that
 * on confirm; a change of the form after the preview needs a new preview. */
function DDLAction({ label, request, onDone }: { label: string; request: () => { method: string; path: string; body?: unknown } | string; onDone: () => void }) {
  const [ddl, setDDL] = useState<{ text: string; key: string } | null>(null)
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const r = request()
  const key = typeof r === 'string' ? '' : JSON.stringify(r)
  const send = async (dry: boolean) => {
    if (typeof r === 'string') return setError(r)
    setError('')
    setBusy(true)
    try {
      const path = r.path + (dry ? '?dry_run=true' : '')
      const res =
        r.method === 'DELETE' ? await del<{ ddl: string }>(path) : r.method === 'PATCH' ? await patch<{ ddl: string }>(path, r.body) : await post<{ ddl: string }>(path, r.body)
      if (dry) setDDL({ text: res.ddl, key })
      else {
        setDDL(null)
        onDone()
      }
    } catch (e) {
      setError(e instanceof ApiError && e.body.sqlstate ? `${message(e)} (SQLSTATE ${e.body.sqlstate})` : message(e))
    } finally {
      setBusy(false)
    }
  }
  const fresh = ddl && ddl.key === key
  return (
    <div class="ddl-action">
      <ErrorBox error={error} />
      <div class="actions">
        <button type="button" disabled={busy} onClick={() => send(true)}>
          Preview {label}
        </button>
        {fresh && (
          <button type="button" class="primary" disabled={busy} onClick={() => send(false)}>
            Run {label}
          </button>
        )}
      </div>
      {fresh && (
        <pre class="ddl" role="region" aria-label={`DDL of ${label}`} tabIndex={0}>
          {ddl.text}
        </pre>
      )}
    </div>
  )
}

type DefKind = '' | 'value' | 'expression'
type ColDraft = { name: string; type: string; notNull: boolean; pk: boolean; identity: boolean; defKind: DefKind; def: string }
const blankCol = (): ColDraft => ({ name: '', type: 'text', notNull: false, pk: false, identity: false, defKind: '', def: '' })

/** columnDef is the API's column of a drafted one. */
function columnDef(c: ColDraft): ColumnDef {
  const d: ColumnDef = { name: c.name.trim(), type: c.type.trim() }
  if (c.notNull) d.nullable = false
  if (c.pk) d.primary_key = true
  if (c.identity) d.identity = true
  if (c.defKind === 'value') d.default = { value: c.def }
  if (c.defKind === 'expression') d.default = { expression: c.def }
  return d
}

/** ColumnFields edits one drafted column (a new table's, or one to add). */
function ColumnFields({ c, n, set, create }: { c: ColDraft; n: string; set: (c: ColDraft) => void; create: boolean }) {
  const id = 'col-' + n.replace(/\W/g, '-')
  return (
    <fieldset class="col-fields">
      <legend>{n}</legend>
      <div>
        <label for={id + '-name'}>Name</label>
        <input id={id + '-name'} value={c.name} onInput={(e) => set({ ...c, name: (e.target as HTMLInputElement).value })} />
      </div>
      <div>
        <label for={id + '-type'}>Type</label>
        <input id={id + '-type'} list="pg-types" value={c.type} onInput={(e) => set({ ...c, type: (e.target as HTMLInputElement).value })} />
      </div>
      <div>
        <label for={id + '-def'}>Default</label>
        <select aria-label={n + ' default kind'} value={c.defKind} onChange={(e) => set({ ...c, defKind: (e.target as HTMLSelectElement).value as DefKind })}>
          <option value="">none</option>
          <option value="value">value</option>
          <option value="expression">expression</option>
        </select>
        {c.defKind === 'value' && <input id={id + '-def'} value={c.def} onInput={(e) => set({ ...c, def: (e.target as HTMLInputElement).value })} />}
        {c.defKind === 'expression' && (
          <select id={id + '-def'} value={c.def} onChange={(e) => set({ ...c, def: (e.target as HTMLSelectElement).value })}>
            <option value="">choose…</option>
            {['now()', 'current_timestamp', 'current_date', 'localtimestamp', 'gen_random_uuid()'].map((x) => (
              <option value={x}>{x}</option>
            ))}
          </select>
        )}
      </div>
      <label class="check">
        <input type="checkbox" checked={c.notNull} onChange={(e) => set({ ...c, notNull: (e.target as HTMLInputElement).checked })} /> Not null
      </label>
      {create && (
        <label class="check">
          <input type="checkbox" checked={c.pk} onChange={(e) => set({ ...c, pk: (e.target as HTMLInputElement).checked })} /> Primary key
        </label>
      )}
      <label class="check">
        <input type="checkbox" checked={c.identity} onChange={(e) => set({ ...c, identity: (e.target as HTMLInputElement).checked })} /> Identity
      </label>
    </fieldset>
  )
}

function TypeList() {
  return (
    <datalist id="pg-types">
      {TYPES.map((t) => (
        <option value={t} />
      ))}
    </datalist>
  )
}

/** NewTable is the create-table form: a name and its columns; the DDL is shown before it runs. */
function NewTable({ path, onDone }: { path: string; onDone: (schema: string, name: string) => void }) {
  const [schema, setSchema] = useState('public')
  const [name, setName] = useState('')
  const [cols, setCols] = useState<ColDraft[]>([{ ...blankCol(), name: 'id', type: 'bigint', pk: true, identity: true }])
  return (
    <form class="card schema-form" aria-label="New table" onSubmit={(e) => e.preventDefault()}>
      <TypeList />
      <div class="row">
        <div>
          <label for="new-table-schema">Schema</label>
          <input id="new-table-schema" value={schema} onInput={(e) => setSchema((e.target as HTMLInputElement).value)} />
        </div>
        <div>
          <label for="new-table-name">Table name</label>
          <input id="new-table-name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </div>
      </div>
      {cols.map((c, i) => (
        <div class="col-line">
          <ColumnFields c={c} n={`Column ${i + 1}`} create set={(x) => setCols(cols.map((y, j) => (j === i ? x : y)))} />
          {cols.length > 1 && (
            <button type="button" aria-label={`Remove column ${i + 1}`} onClick={() => setCols(cols.filter((_, j) => j !== i))}>
              ✕
            </button>
          )}
        </div>
      ))}
      <div class="actions">
        <button type="button" onClick={() => setCols([...cols, blankCol()])}>
          Add a column
        </button>
      </div>
      <DDLAction
        label="create table"
        request={() => (name.trim() ? { method: 'POST', path: path + '/tables', body: { schema: schema.trim(), name: name.trim(), columns: cols.map(columnDef) } } : 'Name the table first.')}
        onDone={() => onDone(schema.trim(), name.trim())}
      />
    </form>
  )
}

/** ColumnsEditor lists the table's columns with their alter and drop forms, and the form to add one. */
function ColumnsEditor({ base, columns, onDone }: { base: string; columns: Column[]; onDone: () => void }) {
  const [add, setAdd] = useState<ColDraft>(blankCol())
  const [open, setOpen] = useState('')
  return (
    <section class="card schema-form" aria-label="Columns">
      <TypeList />
      <ul class="col-list">
        {columns.map((c) => (
          <li>
            <div class="col-summary">
              <strong>{c.name}</strong> <span class="coltype">{c.data_type}</span>
              {!c.is_nullable && <span class="coltype"> not null</span>}
              {c.is_primary_key && <span class="coltype"> primary key</span>}
              {c.default && <span class="coltype"> default {c.default}</span>}
              {c.foreign_key && (
                <span class="coltype">
                  {' '}
                  → {c.foreign_key.schema}.{c.foreign_key.table}.{c.foreign_key.column}
                </span>
              )}
              <button aria-expanded={open === c.name} aria-label={`Change column ${c.name}`} onClick={() => setOpen(open === c.name ? '' : c.name)}>
                Change
              </button>
            </div>
            {open === c.name && <AlterColumn base={base} c={c} onDone={() => (setOpen(''), onDone())} />}
          </li>
        ))}
      </ul>
      <h3>Add a column</h3>
      <ColumnFields c={add} n="New column" set={setAdd} create={false} />
      <DDLAction
        label="add column"
        request={() => (add.name.trim() ? { method: 'POST', path: base + '/columns', body: columnDef(add) } : 'Name the column first.')}
        onDone={() => (setAdd(blankCol()), onDone())}
      />
    </section>
  )
}

/** AlterColumn changes one column (rename, type, nullability, default) or drops it. */
function AlterColumn({ base, c, onDone }: { base: string; c: Column; onDone: () => void }) {
  const [name, setName] = useState(c.name)
  const [type, setType] = useState(c.data_type)
  const [nullable, setNullable] = useState(c.is_nullable ? 'null' : 'not null')
  const [def, setDef] = useState<'keep' | 'set' | 'drop'>('keep')
  const [value, setValue] = useState('')
  const id = 'alter-' + c.name.replace(/\W/g, '-')
  const body: Schemas['AlterColumnRequest'] = {}
  if (name.trim() !== c.name) body.name = name.trim()
  if (type.trim() !== c.data_type) body.type = type.trim()
  if ((nullable === 'null') !== c.is_nullable) body.nullable = nullable === 'null'
  if (def === 'set') body.default = { value }
  if (def === 'drop') body.drop_default = true
  const col = `${base}/columns/${seg(c.name)}`
  return (
    <div class="alter-column">
      <div class="row">
        <div>
          <label for={id + '-name'}>Name</label>
          <input id={id + '-name'} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </div>
        <div>
          <label for={id + '-type'}>Type</label>
          <input id={id + '-type'} list="pg-types" value={type} onInput={(e) => setType((e.target as HTMLInputElement).value)} />
        </div>
        <div>
          <label for={id + '-null'}>Nulls</label>
          <select id={id + '-null'} value={nullable} onChange={(e) => setNullable((e.target as HTMLSelectElement).value)}>
            <option value="null">allowed</option>
            <option value="not null">not null</option>
          </select>
        </div>
        <div>
          <label for={id + '-def'}>Default</label>
          <select id={id + '-def'} value={def} onChange={(e) => setDef((e.target as HTMLSelectElement).value as 'keep')}>
            <option value="keep">unchanged</option>
            <option value="set">set a value</option>
            <option value="drop">drop</option>
          </select>
          {def === 'set' && <input aria-label={`New default of ${c.name}`} value={value} onInput={(e) => setValue((e.target as HTMLInputElement).value)} />}
        </div>
      </div>
      <DDLAction label="change" request={() => (Object.keys(body).length ? { method: 'PATCH', path: col, body } : 'Change something first.')} onDone={onDone} />
      <DDLAction label={`drop ${c.name}`} request={() => ({ method: 'DELETE', path: col })} onDone={onDone} />
    </div>
  )
}
