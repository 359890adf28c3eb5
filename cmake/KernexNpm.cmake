# The npm packages nobody here wrote that the MCP interop tests, bench/mcp and the `kernex serve`
# OpenAI-compatibility test (the official `openai` client) run against, pinned.
# Installed into <build>/npm (network needed once; later runs reuse the install).
find_program(KERNEX_NODE node)
find_program(KERNEX_NPM npm)
set(KERNEX_NPM_DIR ${CMAKE_BINARY_DIR}/npm)
set(KERNEX_NPM_PACKAGES
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/sdk@1.32.2
  openai@7.55.0)
set(KERNEX_NPM_INSTALL_COMMAND
  ${KERNEX_NPM} install --prefix ${KERNEX_NPM_DIR} --no-audit --no-fund --loglevel=error ${KERNEX_NPM_PACKAGES})
