import { defineConfig, type Plugin } from 'vite'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { brotliCompressSync, constants, gzipSync } from 'node:zlib'

// precompress writes a .gz and a .br of every script and style sheet next to it, at the highest levels
// (they are made once, at build time, and served many times): ui/embed.go embeds them and serves the one
// the browser accepts. Both encoders are deterministic, so TestBuildIsCurrent can compare the output.
function precompress(): Plugin {
  return {
    name: 'precompress',
    apply: 'build',
    enforce: 'post',
    // After the files are written: their bytes are final then (vite still rewrites chunks and minifies
    // style sheets in its own generateBundle).
    writeBundle(options, bundle) {
      for (const fileName of Object.keys(bundle)) {
        if (!/\.(js|css)$/.test(fileName)) continue
        const file = join(options.dir ?? 'dist', fileName)
        const src = readFileSync(file)
        writeFileSync(file + '.gz', gzipSync(src, { level: 9 }))
        writeFileSync(
          file + '.br',
          brotliCompressSync(src, { params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: src.length } }),
        )
      }
    },
  }
}

// The build is committed (ui/dist) and embedded by ui/embed.go: go build needs no Node. The Go test
// TestBuildIsCurrent rebuilds it from these sources and fails when the committed output is stale.
export default defineConfig({
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  plugins: [precompress()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
})
