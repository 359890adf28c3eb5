// Versioned schema migrations, each applied once in its own transaction.
#pragma once

#include "sqlite_db.hpp"

namespace kernex::sqlite {

// Applies every migration not yet recorded in `_migrations`, each atomically with its record,
// so a failure leaves the previous version intact and two processes opening the same new file
// apply each migration once.
Result<void> migrate(Db& db);

}  // namespace kernex::sqlite
