// Versioned schema migrations, applied at open under a database-wide advisory lock so several
// processes starting at once apply each version exactly once.
#pragma once

#include "kernex/error.hpp"
#include "kernex/pg/pool.hpp"

namespace kernex::postgres {

Result<void> migrate(pg::Pool& pool);

}  // namespace kernex::postgres
