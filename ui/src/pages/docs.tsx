import { useState } from 'preact/hooks'
import { get } from '../api'
import { ErrorBox, useLoad } from '../ui'

// The API reference, read from the same /v1/openapi.json the clients are generated from: one section
// per area (tag), each operation with its scope, parameters, body and answers. No third party involved.

type Schema = Record<string, any>
interface Doc {
  info: { title: string; version: string; description: string }
  tags: { name: string; description: string }[]
  paths: Record<string, Record<string, any>>
  components: { schemas: Record<string, Schema>; responses: Record<string, any> }
}

function resolve(doc: Doc, s: Schema | undefined): Schema {
  if (s && s.$ref) return doc.components.schemas[s.$ref.split('/').pop()] ?? {}
  return s ?? {}
}

function typeOf(doc: Doc, s: Schema): string {
  if (!s) return ''
  if (s.$ref) return s.$ref.split('/').pop()
  if (s.oneOf) return s.oneOf.map((x: Schema) => typeOf(doc, x)).filter(Boolean).join(' | ')
  if (s.enum) return s.enum.map((v: unknown) => JSON.stringify(v)).join(' | ')
  if (s.type === 'array') return typeOf(doc, s.items) + '[]'
  const t = Array.isArray(s.type) ? s.type.join(' | ') : s.type ?? 'any'
  return s.format ? `${t} (${s.format})` : t
}

function bounds(s: Schema): string {
  const b: string[] = []
  for (const [k, label] of [['minLength', 'min length'], ['maxLength', 'max length'], ['minimum', 'min'], ['maximum', 'max'], ['minItems', 'min items'], ['const', 'must be']]) {
    if (s[k] !== undefined) b.push(`${label} ${JSON.stringify(s[k])}`)
  }
  return b.join(', ')
}

function Fields({ doc, schema }: { doc: Doc; schema: Schema | undefined }) {
  const s = resolve(doc, schema)
  if (!s.properties) return <code>{typeOf(doc, schema ?? {})}</code>
  const required: string[] = s.required ?? []
  return (
    <table class="fields">
      <tbody>
        {Object.entries(s.properties as Record<string, Schema>).map(([name, f]) => (
          <tr key={name}>
            <td>
              <code>{name}</code>
              {required.includes(name) && <span class="hint"> required</span>}
            </td>
            <td>
              <code>{typeOf(doc, f)}</code>
              {bounds(f) && <span class="hint"> {bounds(f)}</span>}
            </td>
            <td>{f.description ?? resolve(doc, f).description ?? ''}</td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}

function Operation({ doc, method, path, op }: { doc: Doc; method: string; path: string; op: any }) {
  const [open, setOpen] = useState(false)
  const body = op.requestBody?.content?.['application/json']?.schema
  const raw = !body && op.requestBody ? Object.keys(op.requestBody.content)[0] : ''
  return (
    <div class="op">
      <button class="op-head" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span class={'method m-' + method}>{method.toUpperCase()}</span> <code>{path}</code> <span class="hint">{op.summary}</span>
      </button>
      {open && (
        <div class="op-body">
          {op.description && <p>{op.description}</p>}
          {op.parameters?.length > 0 && (
            <>
              <h4>Parameters</h4>
              <table class="fields">
                <tbody>
                  {op.parameters.map((p: any) => (
                    <tr key={p.in + p.name}>
                      <td>
                        <code>{p.name}</code> <span class="hint">{p.in}{p.required ? ', required' : ''}</span>
                      </td>
                      <td>
                        <code>{typeOf(doc, p.schema)}</code>
                      </td>
                      <td>{p.description ?? ''}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
          {body && (
            <>
              <h4>Body</h4>
              <Fields doc={doc} schema={body} />
            </>
          )}
          {raw && (
            <p>
              Body: raw <code>{raw}</code>
            </p>
          )}
          <h4>Answers</h4>
          <ul>
            {Object.entries(op.responses as Record<string, any>).map(([code, r]) => {
              const res = r.$ref ? doc.components.responses[r.$ref.split('/').pop()] : r
              return (
                <li key={code}>
                  <code>{code}</code> {res.description}
                  {code.startsWith('2') && res.content?.['application/json']?.schema && <Fields doc={doc} schema={res.content['application/json'].schema} />}
                </li>
              )
            })}
          </ul>
        </div>
      )}
    </div>
  )
}

export function Docs() {
  const { data: doc, error } = useLoad(() => get<Doc>('/v1/openapi.json'), [])
  const [filter, setFilter] = useState('')
  if (!doc) return <main>{error ? <ErrorBox error={error} /> : <p class="loading">Loading…</p>}</main>
  const ops = Object.entries(doc.paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, op]) => ({ path, method, op })))
  const shown = ops.filter((o) => !filter || (o.path + ' ' + o.op.summary).toLowerCase().includes(filter.toLowerCase()))
  return (
    <main class="docs">
      <h1>
        {doc.info.title} <span class="hint">{doc.info.version}</span>
      </h1>
      <p>
        The machine-readable document is <a href="/v1/openapi.json">/v1/openapi.json</a>; the TypeScript client is generated from it.
      </p>
      <label for="docs-filter">Find an operation</label>
      <input id="docs-filter" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
      {doc.tags.map((tag) => {
        const mine = shown.filter((o) => o.op.tags?.includes(tag.name))
        if (mine.length === 0) return null
        return (
          <section class="card" key={tag.name} id={'tag-' + tag.name}>
            <h2>{tag.name}</h2>
            {tag.description && <p class="hint">{tag.description}</p>}
            {mine.map((o) => (
              <Operation doc={doc} method={o.method} path={o.path} op={o.op} key={o.method + o.path} />
            ))}
          </section>
        )
      })}
    </main>
  )
}
