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
# Skills (hostile input from the internet): SKILL.md frontmatter, the spec lint, mcp.json, locks.
foreach(format yaml toml spec_lint mcp_json lock)
  kernex_fuzz_target(skill_${format} LIBS kernex::skills)
endforeach()
kernex_fuzz_target(replay_script LIBS kernex::skills)  # its scratch folder: skill_files.hpp
kernex_fuzz_target(repl_reply SOURCES ${PROJECT_SOURCE_DIR}/plugins/toolbox-repl/eval_reply.cpp
  INCLUDES ${PROJECT_SOURCE_DIR}/plugins/toolbox-repl)
kernex_fuzz_target(permission_glob)
kernex_fuzz_target(command_allowlist)
# MCP: a server's output as the client reads it, and `kernex mcp serve`; `kernex serve` over HTTP.
kernex_fuzz_target(mcp_framing LIBS kernex::mcp)
kernex_fuzz_target(mcp_client_messages LIBS kernex::mcp INCLUDES ${PROJECT_SOURCE_DIR}/mcp/src)
kernex_fuzz_target(mcp_server LIBS kernex::mcp)
kernex_fuzz_target(serve_http LIBS kernex::server)
# Topologies (kernex::topology): TOPOLOGY.toml and TOPOLOGY.yaml.
kernex_fuzz_target(topology_toml LIBS kernex::topology)
kernex_fuzz_target(topology_yaml LIBS kernex::topology)
