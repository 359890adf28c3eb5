// Structured output checked by the kernel (response_format json_object / json_schema): the
// answer, with a Markdown code fence around it removed, must parse and satisfy the schema. The
// loop asks the model again, within the run's turns, when it does not.
#pragma once

#include <expected>
#include <string>

#include "kernex/generation.hpp"

namespace kernex {

// The answer's JSON text, or why it is not what `format` asks for. Text formats pass as they are.
std::expected<std::string, std::string> structured_answer(const ResponseFormat& format,
                                                          const std::string& text);
// What the model is told after a wrong answer.
std::string structured_retry_prompt(const ResponseFormat& format, const std::string& problem);

}  // namespace kernex
