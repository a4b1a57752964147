import { useState } from 'preact/hooks'
import { del, get, patch, put, seg, type Schemas } from '../api'
import { ErrorBox, Form, Table, useListAction, useLoad } from '../ui'
import { bytes } from './overview'

// The operator's view of organizations' usage and quotas, and of the plans (issue 29 §3): the plans and
// quotas are the operators' configuration (GET/PUT/DELETE /v1/plans, PATCH /v1/organizations/{id}/quota).

type Plan = Schemas['Plan']
type Quota = Schemas['OrganizationQuota']
type Usage = Schemas['Usage']

const mib = 1 << 20

/** OrgUsage is an organization's projects and storage against its quota (its usage, which operators may
 * read for any organization). */
export function OrgUsage({ orgID, quota }: { orgID: string; quota: Quota }) {
  const { data, error } = useLoad(() => get<{ usage: Usage }>('/v1/organizations/' + seg(orgID) + '/usage'), [orgID, quota.projects_limit, quota.storage_limit_bytes])
  const t = data?.usage.totals
  if (error) return <span class="hint">usage unavailable</span>
  return (
    <div class="org-usage">
      <div>
        {t ? t.projects : '…'} / {quota.projects_limit} projects
      </div>
      <div class="hint">
        {t ? bytes(t.storage_bytes) : '…'} / {bytes(quota.storage_limit_bytes)}
      </div>
      <div class="hint">
        {t ? t.previews : '…'} / {quota.previews_limit} previews
      </div>
    </div>
  )
}

/** QuotaEditor sets an organization's own quota, or puts it back on the default. */
export function QuotaEditor({ org, onDone }: { org: { id: string; name: string; quota: Quota }; onDone: () => void }) {
  const [projects, setProjects] = useState(String(org.quota.projects_limit))
  const [previews, setPreviews] = useState(String(org.quota.previews_limit))
  const [storage, setStorage] = useState(String(Math.round(org.quota.storage_limit_bytes / mib)))
  const [error, setError] = useState('')
  const num = (set: (v: string) => void) => (e: Event) => set((e.target as HTMLInputElement).value)
  return (
    <section class="card">
      <h2>Quota of {org.name}</h2>
      <p>What it may hold. Lowering a limit under what it holds deletes nothing: it can make no more.</p>
      <Form
        label={'Quota of ' + org.name}
        onSubmit={async () => {
          await patch('/v1/organizations/' + seg(org.id) + '/quota', {
            projects_limit: Number(projects),
            previews_limit: Number(previews),
            storage_limit_bytes: Number(storage) * mib,
          })
          onDone()
        }}
      >
        <div class="row">
          <div>
            <label for="quota-projects">Projects</label>
            <input id="quota-projects" type="number" min={0} required value={projects} onInput={num(setProjects)} />
          </div>
          <div>
            <label for="quota-previews">Previews</label>
            <input id="quota-previews" type="number" min={0} required value={previews} onInput={num(setPreviews)} />
          </div>
          <div>
            <label for="quota-storage">Storage (MiB)</label>
            <input id="quota-storage" type="number" min={1} required value={storage} onInput={num(setStorage)} />
          </div>
        </div>
        <div class="actions">
          <button type="submit" class="primary">
            Save quota
          </button>
          <button
            type="button"
            onClick={async () => {
              try {
                await patch('/v1/organizations/' + seg(org.id) + '/quota', { default: true })
                onDone()
              } catch (e) {
                setError(String((e as Error).message))
              }
            }}
          >
            Use the default
          </button>
          <button type="button" onClick={onDone}>
            Cancel
          </button>
        </div>
      </Form>
      <ErrorBox error={error} />
    </section>
  )
}

const fields: { key: keyof Omit<Plan, 'name'>; label: string; unit?: number; min: number; step?: string }[] = [
  { key: 'max_connections', label: 'Connections', min: 10 },
  { key: 'storage_limit_bytes', label: 'Storage (MiB)', unit: mib, min: 16 },
  { key: 'kv_memory_mb', label: 'Key-value MiB', min: 1 },
  { key: 'previews_limit', label: 'Previews', min: 0 },
  { key: 'ai_uses_per_month', label: 'AI uses / month', min: 0 },
  { key: 'memory_bytes', label: 'Memory (MiB)', unit: mib, min: 64 },
  { key: 'cpu_cores', label: 'CPU cores', min: 0.05, step: '0.05' },
]

/** Plans lists the plans and edits one (or makes a new one): a change applies to every project on it. */
export function Plans() {
  const list = useLoad(() => get<{ plans: Plan[] }>('/v1/plans'), [])
  const [editing, setEditing] = useState<Plan | null>(null)
  const [isNew, setIsNew] = useState(false)
  const [values, setValues] = useState<Record<string, string>>({})
  const [applied, setApplied] = useState('')
  const [actionError, act] = useListAction(list)
  const edit = (p: Plan, fresh: boolean) => {
    setEditing(p)
    setIsNew(fresh)
    setApplied('')
    setValues(Object.fromEntries([['name', p.name], ...fields.map((f) => [f.key, String(f.unit ? Math.round(p[f.key] / f.unit) : p[f.key])])]))
  }
  return (
    <section class="card" aria-labelledby="plans-heading">
      <h2 id="plans-heading">Plans</h2>
      <p class="hint">A project's size and quotas. Changing a plan applies it to every project on it: connection and storage limits, key-value memory, the server's memory and CPU.</p>
      <ErrorBox error={list.error || actionError} />
      {applied && (
        <p class="notice" aria-live="polite">
          {applied}
        </p>
      )}
      {list.data && (
        <div class="plan-table">
          <Table cols={['Plan', 'Connections', 'Storage', { label: 'Key-value', sm: true }, { label: 'Previews', sm: true }, { label: 'Memory', sm: true }, { label: 'CPU', sm: true }, { label: 'Actions', hidden: true }]}>
            {list.data.plans.map((p) => (
              <tr key={p.name}>
                <td>{p.name}</td>
                <td>{p.max_connections}</td>
                <td>{bytes(p.storage_limit_bytes)}</td>
                <td class="sm-hide">{p.kv_memory_mb} MiB</td>
                <td class="sm-hide">{p.previews_limit}</td>
                <td class="sm-hide">{bytes(p.memory_bytes)}</td>
                <td class="sm-hide">{p.cpu_cores}</td>
                <td>
                  <div class="cell-actions">
                    <button aria-label={'Edit plan ' + p.name} onClick={() => edit(p, false)}>
                      Edit
                    </button>
                    {p.name !== 'free' && (
                      <button aria-label={'Delete plan ' + p.name} onClick={() => confirm(`Delete plan ${p.name}?`) && act(() => del('/v1/plans/' + seg(p.name)))}>
                        Delete
                      </button>
                    )}
                  </div>
                </td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {!editing && list.data && list.data.plans.length > 0 && (
        <div class="actions">
          <button onClick={() => edit({ ...list.data!.plans[0], name: '' }, true)}>New plan</button>
        </div>
      )}
      {editing && (
        <Form
          label={isNew ? 'New plan' : 'Plan ' + editing.name}
          onSubmit={async () => {
            const body = Object.fromEntries(fields.map((f) => [f.key, Number(values[f.key]) * (f.unit ?? 1)]))
            const res = await put<{ plan: Plan; created: boolean; jobs: unknown[] }>('/v1/plans/' + seg(values.name), body)
            setEditing(null)
            setApplied(`Plan ${res.plan.name} ${res.created ? 'created' : 'saved'}; ${res.jobs.length} project job(s) apply it.`)
            list.reload()
          }}
        >
          <h3>{isNew ? 'New plan' : 'Edit plan ' + editing.name}</h3>
          <div class="row plan-fields">
            {isNew && (
              <div>
                <label for="plan-name">Name</label>
                <input id="plan-name" required pattern="[a-z][a-z0-9_\-]*" maxLength={32} value={values.name} onInput={(e) => setValues({ ...values, name: (e.target as HTMLInputElement).value })} />
              </div>
            )}
            {fields.map((f) => (
              <div key={f.key}>
                <label for={'plan-' + f.key}>{f.label}</label>
                <input
                  id={'plan-' + f.key}
                  type="number"
                  required
                  min={f.min}
                  step={f.step ?? '1'}
                  value={values[f.key]}
                  onInput={(e) => setValues({ ...values, [f.key]: (e.target as HTMLInputElement).value })}
                />
              </div>
            ))}
          </div>
          <div class="actions">
            <button type="submit" class="primary">
              Save plan
            </button>
            <button type="button" onClick={() => setEditing(null)}>
              Cancel
            </button>
          </div>
        </Form>
      )}
    </section>
  )
}

/** usePlanNames are the names of the plans in force (GET /v1/plans), with current among them (a project on
 * a plan since deleted keeps it) — the choices of a project's plan. */
export function usePlanNames(current: string): string[] {
  const { data } = useLoad(() => get<{ plans: Plan[] }>('/v1/plans'), [])
  const names = data ? data.plans.map((p) => p.name) : []
  return names.includes(current) ? names : [current, ...names]
}
