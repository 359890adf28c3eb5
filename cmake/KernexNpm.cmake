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
  # tests/interop/openai_*.mjs: the clients of issue 33, at the newest releases that run on Node 20
  # (openai 7 and @langchain/openai >= 1.5.9 need Node 22); `openai6` is openai 6 under an alias.
  openai6@npm:openai@6.49.0
  @langchain/openai@1.5.8
  @langchain/core@1.4.0
  # The Responses API's other clients (tests/interop/responses_clients.mjs): the AI SDK 6 with its
  # OpenAI providers.
  ai@6.0.325
  @ai-sdk/openai@3.0.141
  @ai-sdk/openai-compatible@2.0.92
  zod@4.6.7)
set(KERNEX_NPM_INSTALL_COMMAND
  ${KERNEX_NPM} install --prefix ${KERNEX_NPM_DIR} --no-audit --no-fund --loglevel=error ${KERNEX_NPM_PACKAGES})
