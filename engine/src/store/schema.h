// The run history's schema: numbered migrations from an empty file to kSchemaVersion.
// Private to the store; see run_store.h for the contract.
#pragma once

#include "sqlite_db.h"
#include "stagecraft/core/status.h"

namespace stagecraft::store {

// PRAGMA application_id of a Stagecraft history ("Stgc"), telling it from other programs' files.
inline constexpr int kApplicationId = 0x53746763;

// Checks that `db` is a run history this build can use (or an empty file) and applies every
// migration above its user_version, each in its own transaction. Touches nothing when it refuses.
Status migrate(SqliteDb& db);

}  // namespace stagecraft::store
