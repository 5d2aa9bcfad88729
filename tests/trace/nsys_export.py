"""Nsight Systems SQLite exports built to the documented schema, for the reader's tests."""

import sqlite3

PUSHPOP, STARTEND, MARK, DOMAIN, CATEGORY = 59, 60, 34, 75, 33
EPOCH = 1_700_000_000_000_000_000


def gtid(pid, tid):
    return (1 << 48) | (pid << 24) | tid


def build_export(path, events, *, enum=True, meta_table="META_DATA_EXPORT", strings=None):
    """An export with the documented tables (no indexes, like nsys writes them)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT "
        "NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
        "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, "
        "int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT)"
    )
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER)")
    db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT)")
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, 'x')", (EPOCH,))
    db.execute(f"CREATE TABLE {meta_table} (name TEXT, value TEXT)")
    db.execute(f"INSERT INTO {meta_table} VALUES ('EXPORT_SCHEMA_VERSION', '3.0.0')")
    if enum:
        db.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
        for name, eid in [
            ("NvtxPushPopRange", PUSHPOP),
            ("NvtxStartEndRange", STARTEND),
            ("NvtxMark", MARK),
            ("NvtxDomainCreate", DOMAIN),
            ("NvtxCategory", CATEGORY),
        ]:
            db.execute("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)", (eid, name, name))
    for sid, value in (strings or {}).items():
        db.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, value))
    db.execute("INSERT INTO StringIds VALUES (999, 'sched')")
    db.execute("INSERT INTO ThreadNames VALUES (999, 0, ?)", (gtid(10, 11),))
    for ev in events:
        cols = ", ".join(ev)
        db.execute(
            f"INSERT INTO NVTX_EVENTS ({cols}) VALUES ({', '.join('?' * len(ev))})",
            tuple(ev.values()),
        )
    db.commit()
    db.close()
    return path
