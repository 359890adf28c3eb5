# Every fuzz target: kernex_fuzz_target(<name> [LIBS ...] [SOURCES ...] [INCLUDES ...]), its
# harness in fuzz/<name>.cpp. Included by fuzz/CMakeLists.txt (one libFuzzer binary each) and by
# tests/CMakeLists.txt (the FuzzRegressions suite replays the committed inputs of all of them),
# each of which defines kernex_fuzz_target its own way.
kernex_fuzz_target(json_untrusted)
kernex_fuzz_target(http_response LIBS kernex_http)
foreach(provider openai anthropic gemini ollama)
  kernex_fuzz_target(provider_${provider})
endforeach()
kernex_fuzz_target(config_yaml)
kernex_fuzz_target(permission_rules)
kernex_fuzz_target(sandbox_profile LIBS kernex::sandbox)
kernex_fuzz_target(sse_parser LIBS kernex_http)
kernex_fuzz_target(mcp_framing LIBS kernex::mcp)
kernex_fuzz_target(mcp_client_messages LIBS kernex::mcp INCLUDES ${PROJECT_SOURCE_DIR}/mcp/src)
kernex_fuzz_target(mcp_server LIBS kernex::mcp)
kernex_fuzz_target(serve_http LIBS kernex::server)
