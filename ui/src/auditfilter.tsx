import { useState } from 'preact/hooks'

/** AuditFilters is the audit listings' filter form (action prefix, actor, time range); onChange gets the
 * query string to add to …/audit-events (action_prefix, actor_id, from, to: docs/api-decisions.md). */
export function AuditFilters({ onChange }: { onChange: (query: string) => void }) {
  const [action, setAction] = useState('')
  const [actor, setActor] = useState('')
  const [from, setFrom] = useState('')
  const [to, setTo] = useState('')
  const apply = (e: Event) => {
    e.preventDefault()
    const q = new URLSearchParams()
    if (action.trim()) q.set('action_prefix', action.trim())
    if (actor.trim()) q.set('actor_id', actor.trim())
    // datetime-local has no zone: it is the browser's local time.
    if (from) q.set('from', new Date(from).toISOString())
    if (to) q.set('to', new Date(to).toISOString())
    onChange(q.toString() ? '&' + q.toString() : '')
  }
  const input = (id: string, label: string, value: string, set: (v: string) => void, type = 'text', placeholder = '') => (
    <div>
      <label for={id}>{label}</label>
      <input id={id} type={type} value={value} placeholder={placeholder} onInput={(e) => set((e.target as HTMLInputElement).value)} />
    </div>
  )
  return (
    <form class="row filters" aria-label="Filter audit events" onSubmit={apply}>
      {input('audit-action', 'Action starts with', action, setAction, 'text', 'member.')}
      {input('audit-actor', 'Actor ID', actor, setActor, 'text', 'usr_…')}
      {input('audit-from', 'From', from, setFrom, 'datetime-local')}
      {input('audit-to', 'To', to, setTo, 'datetime-local')}
      <div>
        <button type="submit">Filter</button>
      </div>
    </form>
  )
}
