import type { ComponentChildren, FunctionComponent } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, isConnectionError } from './api'

/** useLoad runs load now and whenever deps change; reload() runs it again. every (ms) polls. first, when it
 * gives data (an early answer: taken), is shown at once and stands for the first load. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], every = 0, first?: () => T | undefined) {
  const [data, setData] = useState<T | undefined>(() => first?.())
  const [error, setError] = useState<string>('')
  const skip = useRef(data !== undefined)
  const seq = useRef(0)
  const reload = useCallback(() => {
    const n = ++seq.current
    return load().then(
      (d) => {
        if (n === seq.current) {
          setData(d)
          setError('')
        }
      },
      (e) => {
        // No answer at all is the app's one "connection lost" banner: the card keeps what it shows.
        if (n === seq.current && !isConnectionError(e)) setError(message(e))
      },
    )
  }, deps)
  useEffect(() => {
    if (skip.current) skip.current = false
    else reload()
    if (!every) return
    const t = setInterval(reload, every)
    return () => clearInterval(t)
  }, [reload, every])
  return { data, error, reload }
}

export function message(e: unknown): string {
  if (e instanceof ApiError) return e.message
  return String(e)
}

export function ErrorBox({ error }: { error: string }) {
  if (!error) return null
  return (
    <div class="error" role="alert">
      {error}
    </div>
  )
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>
}

/** Badge shows a state; label, when given, is what a person reads for it (the class stays the state's). */
export function Badge({ value, label }: { value: string; label?: string }) {
  return <span class={'badge badge-' + value.replace(/[^a-z]/g, '')}>{label ?? value}</span>
}

/** masked hides a secret: a connection URL's password (user:password@, the rest stays readable), any other
 * value whole. */
export function masked(value: string): string {
  const url = value.replace(/^([a-z]+:\/\/[^:/@]*:)[^@]*@/, '$1••••••@')
  return url !== value ? url : '•'.repeat(Math.min(24, Math.max(8, value.length)))
}

/** CopyField shows a value to copy. */
export function CopyField({ label, value }: { label: string; value: string }) {
  return <Field label={label} value={value} secret={false} />
}

/** SecretField is how every secret is shown (a password, a connection URL with its password, a token, a
 * signing secret, an API key): masked until "Show", "Hide" masks it again, and "Copy" copies it whole
 * without showing it. The value is not in the page while masked. */
export function SecretField({ label, value, hide }: { label: string; value: string; hide?: string[] }) {
  return <Field label={label} value={value} secret hide={hide} />
}

/** Field: a value of several lines (a code snippet) shows in a read-only text area; hide, when given, are
 * the forms the secret takes in value (masked wherever they occur, the rest readable). */
function Field({ label, value, secret, hide }: { label: string; value: string; secret: boolean; hide?: string[] }) {
  const cover = () => (hide?.length ? hide.filter(Boolean).reduce((v, h) => v.split(h).join('••••••'), value) : masked(value))
  const [copied, setCopied] = useState(false)
  const [shown, setShown] = useState(!secret)
  const [error, setError] = useState('')
  const copy = async () => {
    setError('')
    try {
      await navigator.clipboard.writeText(value)
    } catch (e) {
      setError('the browser refused the clipboard: ' + message(e))
      return
    }
    setCopied(true)
    setTimeout(() => setCopied(false), 1500)
  }
  const id = 'copy-' + label.replace(/\W+/g, '-').toLowerCase()
  return (
    <div class="copy">
      <label for={id}>{label}</label>
      <div class="copy-row">
        {value.includes('\n') ? (
          <textarea id={id} class="snippet" readOnly rows={value.split('\n').length} spellcheck={false} value={shown ? value : cover()} />
        ) : (
          <input id={id} readOnly value={shown ? value : cover()} onFocus={(e) => (e.target as HTMLInputElement).select()} />
        )}
        {secret && (
          <button type="button" onClick={() => setShown(!shown)} aria-label={(shown ? 'Hide ' : 'Show ') + label} aria-pressed={shown}>
            {shown ? 'Hide' : 'Show'}
          </button>
        )}
        <button type="button" onClick={copy} aria-label={(copied ? 'Copied ' : 'Copy ') + label}>
          {copied ? 'Copied' : 'Copy'}
        </button>
      </div>
      <ErrorBox error={error} />
    </div>
  )
}

/** plural says "1 row", "2 rows", "0 rows" (other: the plural when it is not word + s). */
export function plural(n: number, word: string, other = word + 's'): string {
  return `${n} ${n === 1 ? word : other}`
}

/** useTitle names the browser tab after the page: "title — Appliance" (null: a component below names it). */
export function useTitle(title: string | null) {
  useEffect(() => {
    if (title !== null) document.title = title ? title + ' — Appliance' : 'Appliance'
  }, [title])
}

// One formatter for every date shown: toLocaleString with options builds a new one at each call, which
// was the project page's costliest function on its first render (ten jobs, a few ms each).
let dateTime: Intl.DateTimeFormat | undefined

export function when(iso: string): string {
  if (!iso) return '-'
  dateTime ??= new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' })
  const d = new Date(iso)
  return isNaN(d.getTime()) ? String(d) : dateTime.format(d) // String: "Invalid Date", as toLocaleString said
}

/** Form runs submit with a busy state and shows its error. */
export function Form({ onSubmit, children, label }: { onSubmit: () => Promise<void>; children: ComponentChildren; label: string }) {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState('')
  return (
    <form
      aria-label={label}
      onSubmit={async (e) => {
        e.preventDefault()
        setBusy(true)
        setError('')
        try {
          await onSubmit()
        } catch (err) {
          setError(message(err))
        } finally {
          setBusy(false)
        }
      }}
    >
      <fieldset disabled={busy}>{children}</fieldset>
      <ErrorBox error={error} />
    </form>
  )
}

/** A column of Table: its heading, hidden on a phone (sm), or only for screen readers (hidden). */
export type Column = string | { label: string; sm?: boolean; hidden?: boolean }

/** Table is a list's table: the header from cols, the rows as given, 25 at a time ("Show more"). */
export function Table({ cols, children, page = 25 }: { cols: Column[]; children: ComponentChildren; page?: number }) {
  const [shown, setShown] = useState(page)
  const rows = Array.isArray(children) ? children : [children]
  const more = rows.length - shown
  return (
    <>
    <table>
      <thead>
        <tr>
          {cols.map((c) => {
            const col = typeof c === 'string' ? { label: c } : c
            return (
              <th scope="col" class={col.sm ? 'sm-hide' : undefined}>
                {col.hidden ? <span class="visually-hidden">{col.label}</span> : col.label}
              </th>
            )
          })}
        </tr>
      </thead>
      <tbody>{more > 0 ? rows.slice(0, shown) : rows}</tbody>
    </table>
    {more > 0 && (
      <button class="spaced" onClick={() => setShown(shown + page)}>
        Show more ({more})
      </button>
    )}
    </>
  )
}

/** useAction runs an action and keeps its error for an ErrorBox. */
export function useAction(): [string, (f: () => Promise<unknown>) => Promise<void>] {
  const [error, setError] = useState('')
  return [
    error,
    async (f) => {
      setError('')
      try {
        await f()
      } catch (e) {
        setError(message(e))
      }
    },
  ]
}

/** useListAction is useAction whose actions reload a list when they succeed. */
export function useListAction(list: { reload: () => unknown }): [string, (f: () => Promise<unknown>) => Promise<void>] {
  const [error, run] = useAction()
  return [
    error,
    (f) =>
      run(async () => {
        await f()
        await list.reload()
      }),
  ]
}

/** isOrgAdmin: the signed-in person may do the organization's admin-only actions (owner or admin role).
 * It is the one role check of the pages: what it refuses is hidden (AdminOnly), not left to a 403. */
export function isOrgAdmin(me: { principal: { is_admin: boolean; idp_organization_role: string } }): boolean {
  return me.principal.is_admin || ['owner', 'admin'].includes(me.principal.idp_organization_role)
}

/** AdminOnly shows children to an owner or admin (isOrgAdmin); to anyone else, a line saying who can
 * do it (what: "create projects") instead of a form that would answer 403. */
export function AdminOnly({ me, what, children }: { me: { principal: { is_admin: boolean; idp_organization_role: string } }; what: string; children: ComponentChildren }) {
  if (isOrgAdmin(me)) return <>{children}</>
  return <p class="hint admin-only">Only an owner or an admin of the organization can {what}.</p>
}

/** lazy is a component whose code is a chunk of its own, fetched the first time it shows (uPlot and the
 * monitoring page, the API reference): the main chunk stays small. */
export function lazy<P extends object>(load: () => Promise<FunctionComponent<P>>): FunctionComponent<P> {
  let loaded: FunctionComponent<P> | null = null
  return function Lazy(props: P) {
    const [C, setC] = useState<FunctionComponent<P> | null>(() => loaded)
    const [error, setError] = useState('')
    useEffect(() => {
      if (C) return
      load().then(
        (c) => {
          loaded = c
          setC(() => c)
        },
        (e) => setError('this page could not be loaded: ' + message(e)),
      )
    }, [])
    if (error) return <ErrorBox error={error} />
    return C ? <C {...props} /> : <p class="loading">Loading…</p>
  }
}
