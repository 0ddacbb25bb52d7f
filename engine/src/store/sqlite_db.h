// SqliteDb and SqliteStmt: the one place the store calls the sqlite3 C API.
//
// Every call that can fail turns its result code into a Status carrying the database's message
// and the file:line of the caller (the SC_SQL() macro), so that an error in the history names
// where it happened. Not part of the public API; used by run_store.cpp and schema.cpp only.
// Not thread-safe: the owner serialises calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "stagecraft/core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace stagecraft::store {

// Where an sqlite call was made, for messages.
struct SqlSite {
  const char* file;
  int line;
};
#define SC_SQL_SITE ::stagecraft::store::SqlSite{__FILE__, __LINE__}

class SqliteStmt;

class SqliteDb {
 public:
  // Opens (creating when `create`) the file read-write. A file that is not a database fails here
  // or at the first statement, never gets overwritten.
  static Result<SqliteDb> open(const std::string& path, bool create, SqlSite site);
  SqliteDb() = default;
  SqliteDb(SqliteDb&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }
  SqliteDb& operator=(SqliteDb&& o) noexcept;
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;
  ~SqliteDb();

  // Runs one or more statements without results.
  Status exec(std::string_view sql, SqlSite site);
  Result<SqliteStmt> prepare(std::string_view sql, SqlSite site);
  // One statement with its parameters bound in order (?1 = args[0], ...), ready to step. The
  // three below are the store's queries written once: prepare, bind, step, read, reset.
  template <typename... Args>
  Result<SqliteStmt> prepare_bound(std::string_view sql, SqlSite site, const Args&... args);
  // Runs a statement that returns no rows.
  template <typename... Args>
  Status run(std::string_view sql, SqlSite site, const Args&... args);
  // Every result row, as read(stmt) returns it.
  template <typename Read, typename... Args>
  auto rows(std::string_view sql, SqlSite site, Read&& read, const Args&... args)
      -> Result<std::vector<std::invoke_result_t<Read&, const SqliteStmt&>>>;
  // The first result row as read(stmt) returns it; nullopt when there is none.
  template <typename Read, typename... Args>
  auto first_row(std::string_view sql, SqlSite site, Read&& read, const Args&... args)
      -> Result<std::optional<std::invoke_result_t<Read&, const SqliteStmt&>>>;
  // The single integer result of a query such as PRAGMA user_version.
  Result<int64_t> query_int(std::string_view sql, SqlSite site);
  int64_t last_insert_rowid() const;
  int changes() const;
  void set_busy_timeout_ms(int ms);

  // The Status for result code rc on this connection.
  Status error(int rc, std::string_view what, SqlSite site) const;
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class SqliteStmt {
 public:
  SqliteStmt() = default;
  SqliteStmt(SqliteStmt&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  SqliteStmt& operator=(SqliteStmt&& o) noexcept;
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  ~SqliteStmt();

  // Binding: 1-based positions, as sqlite numbers them. Errors surface at step().
  SqliteStmt& bind(int pos, int64_t v);
  SqliteStmt& bind(int pos, int v) { return bind(pos, static_cast<int64_t>(v)); }
  SqliteStmt& bind(int pos, double v);  // NaN binds NULL
  SqliteStmt& bind(int pos, std::string_view v);
  SqliteStmt& bind(int pos, const std::string& v) { return bind(pos, std::string_view(v)); }
  SqliteStmt& bind(int pos, const char* v) { return bind(pos, std::string_view(v)); }
  SqliteStmt& bind_null(int pos);
  template <typename T>
  SqliteStmt& bind(int pos, const std::optional<T>& v) {
    return v ? bind(pos, *v) : bind_null(pos);
  }

  // true: a row is ready; false: done. Resets itself after done or error so it can run again.
  Result<bool> step(SqlSite site);
  // step() for a statement with no result rows; then reset for reuse.
  Status run(SqlSite site);
  void reset();

  bool is_null(int col) const;
  int64_t column_int(int col) const;
  double column_double(int col) const;  // NULL reads NaN
  std::string column_text(int col) const;

 private:
  friend class SqliteDb;
  const SqliteDb* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back when not committed.
class SqliteTransaction {
 public:
  static Result<SqliteTransaction> begin(SqliteDb& db, SqlSite site);
  SqliteTransaction(SqliteTransaction&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(SqliteTransaction&&) = delete;
  ~SqliteTransaction();
  Status commit(SqlSite site);

 private:
  explicit SqliteTransaction(SqliteDb* db) : db_(db) {}
  SqliteDb* db_ = nullptr;
};

template <typename... Args>
Result<SqliteStmt> SqliteDb::prepare_bound(std::string_view sql, SqlSite site, const Args&... args) {
  auto st = prepare(sql, site);
  if (!st.ok()) return st;
  int pos = 0;
  (st->bind(++pos, args), ...);
  return st;
}

template <typename... Args>
Status SqliteDb::run(std::string_view sql, SqlSite site, const Args&... args) {
  auto st = prepare_bound(sql, site, args...);
  if (!st.ok()) return st.status();
  return st->run(site);
}

template <typename Read, typename... Args>
auto SqliteDb::rows(std::string_view sql, SqlSite site, Read&& read, const Args&... args)
    -> Result<std::vector<std::invoke_result_t<Read&, const SqliteStmt&>>> {
  auto st = prepare_bound(sql, site, args...);
  if (!st.ok()) return st.status();
  std::vector<std::invoke_result_t<Read&, const SqliteStmt&>> out;
  while (true) {
    auto row = st->step(site);
    if (!row.ok()) return row.status();
    if (!row.value()) return out;
    out.push_back(read(std::as_const(st.value())));
  }
}

template <typename Read, typename... Args>
auto SqliteDb::first_row(std::string_view sql, SqlSite site, Read&& read, const Args&... args)
    -> Result<std::optional<std::invoke_result_t<Read&, const SqliteStmt&>>> {
  auto st = prepare_bound(sql, site, args...);
  if (!st.ok()) return st.status();
  auto row = st->step(site);
  if (!row.ok()) return row.status();
  if (!row.value()) return std::optional<std::invoke_result_t<Read&, const SqliteStmt&>>();
  auto value = read(std::as_const(st.value()));
  st->reset();
  return std::optional(std::move(value));
}

}  // namespace stagecraft::store
