import { defineConfig } from 'vite'

// The build is committed (ui/dist) and embedded by ui/embed.go: go build needs no Node. The Go test
// TestBuildIsCurrent rebuilds it from these sources and fails when the committed output is stale.
export default defineConfig({
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
})
