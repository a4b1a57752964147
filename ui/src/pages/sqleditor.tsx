// The SQL editor (issue 28 §3.1): CodeMirror 6 with SQL highlighting and completion from the project's
// tables and columns, tabs kept per project in localStorage, Run (the selection, else all) and Cancel, one
// result per statement (windowed: only the rows in view are in the DOM), CSV/JSON export and copy,
// EXPLAIN ANALYZE as a plan tree, the project's saved queries and its history. project.tsx imports this
// module lazily: CodeMirror is in its own chunk, not the main one.
import { useEffect, useRef, useState } from 'preact/hooks'
import { EditorState, Compartment, Prec } from '@codemirror/state'
import { EditorView, keymap, lineNumbers, highlightActiveLine, drawSelection, placeholder } from '@codemirror/view'
import { defaultKeymap, history as cmHistory, historyKeymap, indentWithTab } from '@codemirror/commands'
import { syntaxHighlighting, HighlightStyle, bracketMatching } from '@codemirror/language'
import { tags as t } from '@lezer/highlight'
import { autocompletion, closeCompletion, completionKeymap, closeBrackets } from '@codemirror/autocomplete'
import { sql, PostgreSQL, type SQLNamespace } from '@codemirror/lang-sql'
import { get, patch, post, del, seg, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, message, plural, useLoad, when } from '../ui'
import { cellText, ResultGrid, SQLError } from './studio'
import './sqleditor.css'

type StatementResult = Schemas['SQLStatementResult']
type SQLResponse = Schemas['SQLResultResponse']
type SavedQuery = Schemas['SavedQuery']
type HistoryEntry = Schemas['SQLHistoryEntry']
type TableEntry = Schemas['TableEntry']
type Column = Schemas['Column']
type Row = Record<string, unknown>

/** The rows a run keeps (the API's most: the grid shows them windowed). */
const MAX_ROWS = 100000

interface Tab {
  id: string
  title: string
  sql: string
  savedId?: string
}
interface Tabs {
  tabs: Tab[]
  active: string
}

const newID = () => Math.random().toString(36).slice(2, 10)

function loadTabs(projectID: string): Tabs {
  try {
    const t = JSON.parse(localStorage.getItem('sqleditor:' + projectID) || '') as Tabs
    if (t.tabs.length > 0 && t.tabs.some((x) => x.id === t.active)) return t
  } catch {
    /* none kept, or unreadable: start afresh */
  }
  const id = newID()
  return { tabs: [{ id, title: 'Query 1', sql: '' }], active: id }
}

function saveTabs(projectID: string, t: Tabs) {
  try {
    localStorage.setItem('sqleditor:' + projectID, JSON.stringify(t))
  } catch {
    /* storage full or off: the tabs last this visit only */
  }
}

/** csv writes rows as RFC 4180 CSV (every field quoted when it holds a comma, quote or line break). */
export function csv(columns: string[], rows: Row[]): string {
  const field = (s: string) => (/[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s)
  const lines = [columns.map(field).join(',')]
  for (const r of rows) lines.push(columns.map((c) => (r[c] === null || r[c] === undefined ? '' : field(cellText(r[c])))).join(','))
  return lines.join('\r\n') + '\r\n'
}

function download(name: string, type: string, text: string) {
  const url = URL.createObjectURL(new Blob([text], { type }))
  const a = document.createElement('a')
  a.href = url
  a.download = name
  document.body.appendChild(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10000)
}

/** schemaOf builds the completion namespace (schema → table → columns) from the studio's table list. */
async function schemaOf(path: string): Promise<SQLNamespace> {
  const { tables } = await get<{ tables: TableEntry[] }>(path + '/tables')
  const ns: Record<string, Record<string, string[]>> = {}
  // The columns of the first 200 tables (one request each, 6 at a time): enough for completion.
  const list = tables.slice(0, 200)
  let next = 0
  const worker = async () => {
    while (next < list.length) {
      const t = list[next++]
      let cols: string[] = []
      try {
        cols = (await get<{ columns: Column[] }>(`${path}/tables/${seg(t.schema)}/${seg(t.table)}/columns`)).columns.map((c) => c.name)
      } catch {
        /* a table dropped meanwhile: completed without columns */
      }
      ;(ns[t.schema] ||= {})[t.table] = cols
    }
  }
  await Promise.all(Array.from({ length: 6 }, worker))
  return ns
}

/** Editor is CodeMirror on the active tab's text; onRun gets the selection, or the whole text. */
function Editor({ doc, docKey, schema, onChange, onRun, view }: { doc: string; docKey: string; schema: SQLNamespace; onChange: (s: string) => void; onRun: (text: string) => void; view: { current: EditorView | null } }) {
  const host = useRef<HTMLDivElement>(null)
  const lang = useRef(new Compartment())
  const cb = useRef({ onChange, onRun })
  cb.current = { onChange, onRun }
  const language = (s: SQLNamespace) => sql({ dialect: PostgreSQL, schema: s, defaultSchema: 'public', upperCaseKeywords: true })
  const extensions = () => [
    lineNumbers(),
    cmHistory(),
    drawSelection(),
    highlightActiveLine(),
    bracketMatching(),
    closeBrackets(),
    autocompletion(),
    syntaxHighlighting(highlight),
    placeholder('SELECT … (Ctrl+Enter runs the selection, or everything)'),
    lang.current.of(language(schema)),
    Prec.highest(
      keymap.of([
        {
          key: 'Mod-Enter',
          run: (v) => {
            closeCompletion(v)
            const sel = v.state.selection.main
            cb.current.onRun(sel.empty ? v.state.doc.toString() : v.state.sliceDoc(sel.from, sel.to))
            return true
          },
        },
      ]),
    ),
    keymap.of([...completionKeymap, ...defaultKeymap, ...historyKeymap, indentWithTab]),
    EditorView.updateListener.of((u) => {
      if (u.docChanged) cb.current.onChange(u.state.doc.toString())
    }),
    EditorView.contentAttributes.of({ 'aria-label': 'Query', 'aria-multiline': 'true' }),
    theme,
  ]
  useEffect(() => {
    // In a shadow root: CodeMirror's styles go in as constructed style sheets there, which the page's CSP
    // (style-src 'self') allows, where the <style> elements it would add to the document are refused.
    const root = host.current!.shadowRoot || host.current!.attachShadow({ mode: 'open' })
    view.current = new EditorView({ root, parent: root, state: EditorState.create({ doc, extensions: extensions() }) })
    return () => {
      view.current?.destroy()
      view.current = null
    }
  }, [])
  // Another tab: its own text, undo history and selection.
  useEffect(() => {
    const v = view.current
    if (v && v.state.doc.toString() !== doc) v.setState(EditorState.create({ doc, extensions: extensions() }))
  }, [docKey])
  useEffect(() => {
    view.current?.dispatch({ effects: lang.current.reconfigure(language(schema)) })
  }, [schema])
  return <div class="cm-host" ref={host} />
}

/** selectionOrAll is what Run runs: the editor's selection when there is one, else the whole text. */
function selectionOrAll(v: EditorView | null, all: string): string {
  if (!v) return all
  const sel = v.state.selection.main
  return sel.empty ? v.state.doc.toString() : v.state.sliceDoc(sel.from, sel.to)
}

/** highlight colours SQL with the page's palette (sqleditor.css: contrast checked in light and dark). */
const highlight = HighlightStyle.define([
  { tag: t.keyword, color: 'var(--sql-keyword)' },
  { tag: [t.number, t.bool, t.null, t.atom], color: 'var(--sql-literal)' },
  { tag: [t.string, t.special(t.string)], color: 'var(--sql-string)' },
  { tag: [t.typeName, t.standard(t.name)], color: 'var(--sql-type)' },
  { tag: [t.comment, t.lineComment, t.blockComment], color: 'var(--muted)', fontStyle: 'italic' },
])

/** theme fits the editor to the page's colours (custom properties cross the shadow root). */
const theme = EditorView.theme({
  '&': { minHeight: '160px', maxHeight: '420px', fontSize: '13px', color: 'var(--fg)', backgroundColor: 'var(--card)', borderRadius: '6px' },
  '&.cm-focused': { outline: '2px solid var(--accent)', outlineOffset: '1px' },
  '.cm-scroller': { fontFamily: 'ui-monospace, SFMono-Regular, Menlo, monospace', overflow: 'auto' },
  '.cm-gutters': { backgroundColor: 'var(--bg)', color: 'var(--muted)', borderRight: '1px solid var(--line)' },
  '.cm-content': { caretColor: 'var(--fg)', minHeight: '160px' },
  '.cm-activeLine, .cm-activeLineGutter': { backgroundColor: 'color-mix(in srgb, var(--accent) 8%, transparent)' },
  '.cm-placeholder': { color: 'var(--muted)' },
  '.cm-tooltip': { backgroundColor: 'var(--card)', color: 'var(--fg)', border: '1px solid var(--line)' },
  '.cm-tooltip.cm-tooltip-autocomplete > ul > li[aria-selected]': { backgroundColor: 'var(--accent)', color: 'var(--accent-fg)' },
})

interface PlanNode {
  'Node Type': string
  'Relation Name'?: string
  'Index Name'?: string
  Alias?: string
  'Actual Total Time'?: number
  'Actual Rows'?: number
  'Actual Loops'?: number
  'Plan Rows'?: number
  'Total Cost'?: number
  Plans?: PlanNode[]
  [k: string]: unknown
}

/** planOf finds an EXPLAIN (FORMAT JSON) answer in a result: one json column "QUERY PLAN". */
function planOf(r: StatementResult): { Plan: PlanNode; 'Planning Time'?: number; 'Execution Time'?: number } | null {
  if (r.columns.length !== 1 || r.columns[0] !== 'QUERY PLAN' || r.rows.length !== 1) return null
  let v = (r.rows[0] as Row)['QUERY PLAN']
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v)
    } catch {
      return null
    }
  }
  const first = Array.isArray(v) ? v[0] : null
  return first && typeof first === 'object' && 'Plan' in first ? first : null
}

const skip = new Set(['Node Type', 'Plans', 'Relation Name', 'Alias', 'Index Name', 'Actual Total Time', 'Actual Rows', 'Actual Loops', 'Plan Rows', 'Total Cost'])

function PlanTree({ node, depth = 0 }: { node: PlanNode; depth?: number }) {
  const on = [node['Relation Name'] && `on ${node['Relation Name']}${node.Alias && node.Alias !== node['Relation Name'] ? ' ' + node.Alias : ''}`, node['Index Name'] && `using ${node['Index Name']}`]
    .filter(Boolean)
    .join(' ')
  const details = Object.entries(node).filter(([k, v]) => !skip.has(k) && v !== null && typeof v !== 'object')
  return (
    <details class="plan-node" open={depth < 6}>
      <summary>
        <strong>{node['Node Type']}</strong> {on}{' '}
        <span class="hint">
          {node['Actual Total Time'] !== undefined && `${node['Actual Total Time']} ms · `}
          {node['Actual Rows'] !== undefined ? `${node['Actual Rows']} rows` : `${node['Plan Rows']} rows planned`}
          {node['Actual Loops'] !== undefined && node['Actual Loops'] > 1 && ` × ${node['Actual Loops']} loops`} · cost {node['Total Cost']}
        </span>
      </summary>
      {details.length > 0 && (
        <dl class="plan-details">
          {details.map(([k, v]) => (
            <>
              <dt>{k}</dt>
              <dd>{String(v)}</dd>
            </>
          ))}
        </dl>
      )}
      {(node.Plans || []).map((c) => (
        <PlanTree node={c} depth={depth + 1} />
      ))}
    </details>
  )
}

/** StatementPanel is one statement's result: summary, export and copy, the rows windowed or the plan. */
function StatementPanel({ r, n, of }: { r: StatementResult; n: number; of: number }) {
  const [copied, setCopied] = useState('')
  const plan = planOf(r)
  const rows = r.rows as Row[]
  const name = `result-${n}`
  return (
    <section class="stmt-result" aria-label={`Statement ${n} of ${of}`}>
      <div class="stmt-head">
        <h3>
          Statement {n} <span class="hint">{r.command}</span>
        </h3>
        <span class="hint">
          {r.columns.length > 0 ? `${plural(r.row_count, 'row')}${r.truncated ? `, the first ${rows.length} shown` : ''}` : /\d$/.test(r.command) ? `${r.row_count} affected` : ''}
        </span>
        {r.columns.length > 0 && (
          <span class="stmt-actions">
            <button class="link" onClick={() => download(name + '.csv', 'text/csv', csv(r.columns, rows))}>
              CSV
            </button>
            <button class="link" onClick={() => download(name + '.json', 'application/json', JSON.stringify(rows, null, 2))}>
              JSON
            </button>
            <button
              class="link"
              onClick={() =>
                navigator.clipboard.writeText(csv(r.columns, rows).replace(/,/g, '\t')).then(
                  () => setCopied('Copied'),
                  (e) => setCopied('Copy failed: ' + message(e)),
                )
              }
            >
              Copy
            </button>
            <span class="hint" role="status">
              {copied}
            </span>
          </span>
        )}
      </div>
      {plan ? (
        <div class="plan" role="group" aria-label="Plan tree">
          <p class="hint">
            {plan['Planning Time'] !== undefined && `Planning ${plan['Planning Time']} ms`}
            {plan['Execution Time'] !== undefined && ` · execution ${plan['Execution Time']} ms`}
          </p>
          <PlanTree node={plan.Plan} />
        </div>
      ) : (
        r.columns.length > 0 && <ResultGrid columns={r.columns} types={r.column_types} rows={rows} label={`Result of statement ${n}`} />
      )}
    </section>
  )
}

/** SQLEditor is the project's SQL tab. */
export function SQLEditor({ id, path, active }: { id: string; path: string; active: boolean }) {
  const [tabs, setTabs] = useState<Tabs>(() => {
    const t = loadTabs(id)
    // ?sql=: a query to open in a tab of its own (the logs explorer's "Open in SQL studio").
    const prefill = new URLSearchParams(location.search).get('sql')
    if (!prefill) return t
    const nid = newID()
    return { tabs: [...t.tabs, { id: nid, title: `Query ${t.tabs.length + 1}`, sql: prefill }], active: nid }
  })
  const [schema, setSchema] = useState<SQLNamespace>({})
  const [runID, setRunID] = useState('')
  const [results, setResults] = useState<SQLResponse | null>(null)
  const [error, setError] = useState<unknown>(null)
  const [ran, setRan] = useState('')
  const [note, setNote] = useState('')
  const [saveName, setSaveName] = useState<string | null>(null)
  const [renaming, setRenaming] = useState<{ id: string; name: string } | null>(null)
  const [rev, setRev] = useState(0) // bumped when a tab's text is replaced from outside the editor
  const view = useRef<EditorView | null>(null)
  const saved = useLoad(() => get<{ saved_queries: SavedQuery[] }>(path + '/saved-queries'), [id])
  const history = useLoad(() => get<{ history: HistoryEntry[] }>(path + '/sql/history?limit=20'), [id])
  const tab = tabs.tabs.find((t) => t.id === tabs.active) || tabs.tabs[0]

  useEffect(() => saveTabs(id, tabs), [tabs])
  useEffect(() => {
    if (!active) return
    schemaOf(path).then(setSchema, () => setSchema({}))
  }, [id, active])

  const update = (f: (t: Tabs) => Tabs) => setTabs((t) => f(t))
  const setSQL = (s: string) => update((t) => ({ ...t, tabs: t.tabs.map((x) => (x.id === t.active ? { ...x, sql: s } : x)) }))
  const openTab = (title: string, text: string, savedId?: string) => {
    const nid = newID()
    update((t) => ({ tabs: [...t.tabs, { id: nid, title, sql: text, savedId }], active: nid }))
  }
  const closeTab = (tid: string) =>
    update((t) => {
      const rest = t.tabs.filter((x) => x.id !== tid)
      if (rest.length === 0) {
        const nid = newID()
        return { tabs: [{ id: nid, title: 'Query 1', sql: '' }], active: nid }
      }
      return { tabs: rest, active: t.active === tid ? rest[Math.max(0, t.tabs.findIndex((x) => x.id === tid) - 1)].id : t.active }
    })

  const run = async (text: string) => {
    if (!text.trim() || runID) return
    const rid = 'run-' + newID()
    setRunID(rid)
    setError(null)
    setNote('')
    setRan(text)
    try {
      const res = await post<SQLResponse>(path + '/sql', { query: text, run_id: rid, max_rows: MAX_ROWS })
      setResults(res)
      // A table made, changed or dropped: the completion learns it.
      if (res.results.some((r) => /^(CREATE|ALTER|DROP)\b/.test(r.command))) schemaOf(path).then(setSchema, () => {})
    } catch (e) {
      setResults(null)
      setError(e)
    } finally {
      setRunID('')
      history.reload()
    }
  }
  const runNow = () => {
    if (view.current) closeCompletion(view.current)
    run(selectionOrAll(view.current, tab.sql))
  }
  const cancel = async () => {
    if (!runID) return
    try {
      const r = await post<{ cancelled: boolean }>(`${path}/sql/runs/${seg(runID)}/cancel`)
      setNote(r.cancelled ? 'Cancel sent.' : 'The run had already ended.')
    } catch (e) {
      setNote('Cancel failed: ' + message(e))
    }
  }
  const explain = () => {
    const text = selectionOrAll(view.current, tab.sql).trim().replace(/;\s*$/, '')
    if (text) run(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`)
  }
  const save = async () => {
    try {
      if (tab.savedId) {
        await patch(`${path}/saved-queries/${seg(tab.savedId)}`, { sql: tab.sql })
        setNote(`Saved “${tab.title}”.`)
      } else {
        const name = (saveName || '').trim()
        const r = await post<{ saved_query: SavedQuery }>(path + '/saved-queries', { name, sql: tab.sql })
        update((t) => ({ ...t, tabs: t.tabs.map((x) => (x.id === t.active ? { ...x, title: r.saved_query.name, savedId: r.saved_query.id } : x)) }))
        setSaveName(null)
        setNote(`Saved “${r.saved_query.name}”.`)
      }
      saved.reload()
    } catch (e) {
      setNote('Save failed: ' + message(e))
    }
  }
  const rename = async () => {
    if (!renaming) return
    try {
      const r = await patch<{ saved_query: SavedQuery }>(`${path}/saved-queries/${seg(renaming.id)}`, { name: renaming.name })
      update((t) => ({ ...t, tabs: t.tabs.map((x) => (x.savedId === renaming.id ? { ...x, title: r.saved_query.name } : x)) }))
      setRenaming(null)
      saved.reload()
    } catch (e) {
      setNote('Rename failed: ' + message(e))
    }
  }
  const remove = async (q: SavedQuery) => {
    if (!confirm(`Delete the saved query “${q.name}” for everyone in the organization?`)) return
    try {
      await del(`${path}/saved-queries/${seg(q.id)}`)
      update((t) => ({ ...t, tabs: t.tabs.map((x) => (x.savedId === q.id ? { ...x, savedId: undefined } : x)) }))
      saved.reload()
    } catch (e) {
      setNote('Delete failed: ' + message(e))
    }
  }

  const busy = runID !== ''
  const all = results?.results || []
  return (
    <>
      <section class="card sqleditor">
        <div class="card-head">
          <h2>SQL</h2>
          <span class="hint">Runs as the project's role; the statements of one run share a transaction.</span>
        </div>
        <div class="sql-tabs" role="group" aria-label="Editor tabs">
          {tabs.tabs.map((t) => (
            <span class={'sql-tab' + (t.id === tab.id ? ' current' : '')}>
              <button class="tab" aria-pressed={t.id === tab.id} onClick={() => update((s) => ({ ...s, active: t.id }))}>
                {t.title}
                {t.savedId ? '' : ' •'}
              </button>
              <button class="link close" aria-label={'Close ' + t.title} onClick={() => closeTab(t.id)}>
                ×
              </button>
            </span>
          ))}
          <button class="link" aria-label="New tab" onClick={() => openTab(`Query ${tabs.tabs.length + 1}`, '')}>
            + New
          </button>
        </div>
        <Editor doc={tab.sql} docKey={tab.id + ':' + rev} schema={schema} onChange={setSQL} onRun={run} view={view} />
        <div class="actions">
          <button class="primary" disabled={!active || busy || !tab.sql.trim()} onClick={runNow} title="Ctrl+Enter">
            {busy ? 'Running…' : 'Run'}
          </button>
          {busy && (
            <button class="danger" onClick={cancel}>
              Cancel
            </button>
          )}
          <button disabled={!active || busy || !tab.sql.trim()} onClick={explain} title="Runs the statement under EXPLAIN (ANALYZE, FORMAT JSON): it is executed">
            Explain analyze
          </button>
          {tab.savedId ? (
            <button disabled={!tab.sql.trim()} onClick={save}>
              Save
            </button>
          ) : saveName === null ? (
            <button disabled={!tab.sql.trim()} onClick={() => setSaveName(tab.title.startsWith('Query ') ? '' : tab.title)}>
              Save as…
            </button>
          ) : (
            <form
              class="inline-form"
              aria-label="Save the query"
              onSubmit={(e) => {
                e.preventDefault()
                save()
              }}
            >
              <label for="sql-save-name">Name</label>
              <input id="sql-save-name" value={saveName} maxLength={100} onInput={(e) => setSaveName((e.target as HTMLInputElement).value)} />
              <button class="primary" type="submit" disabled={!saveName.trim()}>
                Save
              </button>
              <button type="button" class="link" onClick={() => setSaveName(null)}>
                Cancel
              </button>
            </form>
          )}
          <span class="hint" role="status">
            {note}
          </span>
          {!active && <span class="hint">The project must be active.</span>}
        </div>
        <SQLError error={error} query={ran} />
        {results && (
          <div class="result" aria-live="polite">
            <p class="hint">
              {all.length} {all.length === 1 ? 'statement' : 'statements'} · {results.result.duration_ms} ms
            </p>
            {all.map((r, i) => (
              <StatementPanel key={i} r={r} n={i + 1} of={all.length} />
            ))}
          </div>
        )}
      </section>
      <section class="card">
        <h2>Saved queries</h2>
        <p class="hint">Shared with everyone in the organization who can see this project.</p>
        <ErrorBox error={saved.error} />
        {saved.data && saved.data.saved_queries.length === 0 && <Empty>No saved queries yet.</Empty>}
        {saved.data && saved.data.saved_queries.length > 0 && (
          <ul class="saved-queries">
            {saved.data.saved_queries.map((q) => (
              <li key={q.id}>
                {renaming?.id === q.id ? (
                  <form
                    class="inline-form"
                    aria-label={'Rename ' + q.name}
                    onSubmit={(e) => {
                      e.preventDefault()
                      rename()
                    }}
                  >
                    <label for={'rename-' + q.id}>New name</label>
                    <input id={'rename-' + q.id} value={renaming.name} maxLength={100} onInput={(e) => setRenaming({ id: q.id, name: (e.target as HTMLInputElement).value })} />
                    <button class="primary" type="submit" disabled={!renaming.name.trim()}>
                      Rename
                    </button>
                    <button type="button" class="link" onClick={() => setRenaming(null)}>
                      Cancel
                    </button>
                  </form>
                ) : (
                  <>
                    <strong>{q.name}</strong> <span class="hint">updated {when(q.updated_at)}</span>
                    <span class="stmt-actions">
                      <button
                        class="link"
                        aria-label={'Open ' + q.name}
                        onClick={() => {
                          const open = tabs.tabs.find((t) => t.savedId === q.id)
                          if (open) update((t) => ({ ...t, active: open.id, tabs: t.tabs.map((x) => (x.id === open.id ? { ...x, sql: q.sql, title: q.name } : x)) }))
                          else openTab(q.name, q.sql, q.id)
                          setRev((n) => n + 1)
                        }}
                      >
                        Open
                      </button>
                      <button class="link" aria-label={'Rename ' + q.name} onClick={() => setRenaming({ id: q.id, name: q.name })}>
                        Rename
                      </button>
                      <button class="link" aria-label={'Delete ' + q.name} onClick={() => remove(q)}>
                        Delete
                      </button>
                    </span>
                  </>
                )}
                <code class="history-query">{q.sql}</code>
              </li>
            ))}
          </ul>
        )}
      </section>
      <section class="card">
        <h2>History</h2>
        <ErrorBox error={history.error} />
        {history.data && history.data.history.length === 0 && <Empty>No queries run yet.</Empty>}
        {history.data && history.data.history.length > 0 && (
          <ul class="history">
            {history.data.history.map((h) => (
              <li key={h.id}>
                <div class="history-head">
                  <Badge value={h.success ? 'completed' : 'failed'} label={h.success ? 'ok' : 'error'} />
                  <span class="hint">
                    {when(h.created_at)} · {h.duration_ms} ms{h.success ? ` · ${plural(h.row_count, 'row')}` : ''}
                  </span>
                  <button class="link" aria-label={'Open the query of ' + when(h.created_at) + ' in a new tab'} onClick={() => openTab(`Query ${tabs.tabs.length + 1}`, h.query)}>
                    Open
                  </button>
                </div>
                <code class="history-query">{h.query}</code>
                {!h.success && <div class="hint history-error">{h.error}</div>}
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  )
}
