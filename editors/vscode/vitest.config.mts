import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    // The extension's modules import `vscode`, which only exists inside the editor.
    alias: { vscode: fileURLToPath(new URL("./test/vscode-mock.ts", import.meta.url)) },
  },
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
    restoreMocks: true,
  },
});
