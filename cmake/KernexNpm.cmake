# The npm packages nobody here wrote that the MCP interop tests, bench/mcp and the `kernex serve`
# OpenAI-compatibility tests (the official `openai` client, the AI SDK, LangChain) run against,
# pinned.
# Installed into <build>/npm (network needed once; later runs reuse the install).
find_program(KERNEX_NODE node)
find_program(KERNEX_NPM npm)
set(KERNEX_NPM_DIR ${CMAKE_BINARY_DIR}/npm)
set(KERNEX_NPM_PACKAGES
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/sdk@1.32.2
  openai@7.55.0
  # The Responses API's clients (tests/interop/responses_clients.mjs): the AI SDK 6 with its
  # OpenAI providers, LangChain's ChatOpenAI (1.4.x runs on Node 20; 1.6 needs 22).
  ai@6.0.325
  @ai-sdk/openai@3.0.141
  @ai-sdk/openai-compatible@2.0.92
  @langchain/openai@1.4.7
  @langchain/core@1.4.0
  zod@4.6.7)
set(KERNEX_NPM_INSTALL_COMMAND
  ${KERNEX_NPM} install --prefix ${KERNEX_NPM_DIR} --no-audit --no-fund --loglevel=error ${KERNEX_NPM_PACKAGES})
