// The sqlite3 C API wrapped once. See sqlite_db.h.
#include "sqlite_db.h"

#include <cmath>
#include <cstring>

#include <sqlite3.h>

namespace stagecraft::store {

namespace {

std::string site_text(SqlSite site) {
  const char* f = site.file;
  if (const char* s = std::strstr(f, "src/store/")) f = s + 4;
  return std::string(f) + ":" + std::to_string(site.line);
}

Status status_for(int rc, std::string msg) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return Status::invalid_input(std::move(msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Status::unavailable(std::move(msg));
    case SQLITE_CANTOPEN: return Status::io_error(std::move(msg));
    case SQLITE_CONSTRAINT:
    case SQLITE_MISUSE:
    case SQLITE_RANGE: return Status::internal(std::move(msg));
    default: return Status::io_error(std::move(msg));
  }
}

}  // namespace

Result<SqliteDb> SqliteDb::open(const std::string& path, bool create, SqlSite site) {
  SqliteDb db;
  db.path_ = path;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db.db_ ? sqlite3_errmsg(db.db_) : sqlite3_errstr(rc);
    return status_for(rc, path + ": cannot open the run history: " + msg + " (" + site_text(site) + ")");
  }
  sqlite3_extended_result_codes(db.db_, 1);
  return db;
}

SqliteDb& SqliteDb::operator=(SqliteDb&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = o.db_;
    path_ = std::move(o.path_);
    o.db_ = nullptr;
  }
  return *this;
}

SqliteDb::~SqliteDb() {
  if (db_) sqlite3_close_v2(db_);
}

Status SqliteDb::error(int rc, std::string_view what, SqlSite site) const {
  std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_NOTADB) msg = "the file is not an SQLite database (it was left untouched); give another --db FILE";
  return status_for(rc, path_ + ": " + std::string(what) + ": " + msg + " (" + site_text(site) + ")");
}

Status SqliteDb::exec(std::string_view sql, SqlSite site) {
  const std::string s(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (err) sqlite3_free(err);
  if (rc != SQLITE_OK) return error(rc, "executing " + s.substr(0, 40), site);
  return Status::OK();
}

Result<SqliteStmt> SqliteDb::prepare(std::string_view sql, SqlSite site) {
  SqliteStmt st;
  st.db_ = this;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &st.stmt_, nullptr);
  if (rc != SQLITE_OK) return error(rc, "preparing " + std::string(sql.substr(0, 40)), site);
  return st;
}

Result<int64_t> SqliteDb::query_int(std::string_view sql, SqlSite site) {
  auto st = prepare(sql, site);
  if (!st.ok()) return st.status();
  auto row = st->step(site);
  if (!row.ok()) return row.status();
  if (!row.value()) return Status::internal(path_ + ": " + std::string(sql) + " returned no row");
  const int64_t v = st->column_int(0);
  st->reset();
  return v;
}

int64_t SqliteDb::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int SqliteDb::changes() const { return sqlite3_changes(db_); }
void SqliteDb::set_busy_timeout_ms(int ms) { sqlite3_busy_timeout(db_, ms); }

SqliteStmt& SqliteStmt::operator=(SqliteStmt&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = o.stmt_;
    o.stmt_ = nullptr;
  }
  return *this;
}

SqliteStmt::~SqliteStmt() {
  if (stmt_) sqlite3_finalize(stmt_);
}

SqliteStmt& SqliteStmt::bind(int pos, int64_t v) {
  sqlite3_bind_int64(stmt_, pos, v);
  return *this;
}
SqliteStmt& SqliteStmt::bind(int pos, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(stmt_, pos);
  } else {
    sqlite3_bind_double(stmt_, pos, v);
  }
  return *this;
}
SqliteStmt& SqliteStmt::bind(int pos, std::string_view v) {
  sqlite3_bind_text64(stmt_, pos, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}
SqliteStmt& SqliteStmt::bind_null(int pos) {
  sqlite3_bind_null(stmt_, pos);
  return *this;
}

Result<bool> SqliteStmt::step(SqlSite site) {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) {
    reset();
    return false;
  }
  Status s = db_->error(rc, std::string("running ") + std::string(sqlite3_sql(stmt_)).substr(0, 40), site);
  reset();
  return s;
}

Status SqliteStmt::run(SqlSite site) {
  auto r = step(site);
  if (!r.ok()) return r.status();
  reset();
  return Status::OK();
}

void SqliteStmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool SqliteStmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t SqliteStmt::column_int(int col) const { return sqlite3_column_int64(stmt_, col); }
double SqliteStmt::column_double(int col) const {
  return is_null(col) ? NAN : sqlite3_column_double(stmt_, col);
}
std::string SqliteStmt::column_text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

Result<SqliteTransaction> SqliteTransaction::begin(SqliteDb& db, SqlSite site) {
  if (Status s = db.exec("BEGIN IMMEDIATE", site); !s) return s;
  return SqliteTransaction(&db);
}

SqliteTransaction::~SqliteTransaction() {
  if (db_) sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

Status SqliteTransaction::commit(SqlSite site) {
  Status s = db_->exec("COMMIT", site);
  if (s) db_ = nullptr;
  return s;
}

}  // namespace stagecraft::store
