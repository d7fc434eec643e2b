// The console is served by the gateway's admin listener at /console, from files built
// into the binary by name: one script and one stylesheet with fixed names (the gateway
// revalidates them by ETag), no inline code (the page's Content-Security-Policy forbids
// it), and no module preload helper (there is one chunk).
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2020',
    modulePreload: false,
    cssCodeSplit: false,
    assetsInlineLimit: 0,
    reportCompressedSize: true,
    rolldownOptions: {
      output: {
        entryFileNames: 'assets/app.js',
        chunkFileNames: 'assets/[name].js',
        assetFileNames: 'assets/app[extname]',
      },
    },
  },
});
