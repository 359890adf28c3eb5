// bench/repl's figures for the built-in files tools called from code (issue 36), each beside its
// baseline in the same run:
//   read from code   tools.read() of a 2.5 MB file from eval_code, timed in Python  vs  a bare
//                    open().read() of it in the same sandboxed worker plus one kernel round trip
//   scenario tokens  issue 20's task (the server errors of a 1.7 MB log copied to errors.log) with
//                    the built-in read and write: code that calls them  vs  the model calling
//                    them itself (the file read in pages its cut view allows), and vs one read
// No npm needed: the repl and files toolboxes and the replay provider only.
#pragma once

namespace kernex::bench {

// `reads`: reads of each way, alternating, in one eval_code; `tokens`: the scenario too.
void builtin_read_benches(int reads, bool tokens = true);

}  // namespace kernex::bench
