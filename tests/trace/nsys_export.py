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


#: CUDA tables as the export schema documents them (nsys 2025.1, schema 3.17: the columns of
#: ``NVIDIA__Fuser__report1.sqlite``), without the columns the reader ignores
CUDA_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
    "INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId "
    "INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
    "mangledName INTEGER, gridX INTEGER, blockX INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
    "INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId "
    "INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind "
    "INTEGER, dstKind INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
    "INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId "
    "INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass "
    "INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
    "returnValue INTEGER NOT NULL, callchainId INTEGER",
    "OSRT_API": "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
    "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel "
    "INTEGER, callchainId INTEGER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "start INTEGER NOT NULL, end INTEGER NOT NULL, "
    "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
    "correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER",
    "ENUM_CUDA_MEMCPY_OPER": "id INTEGER PRIMARY KEY, name TEXT NOT NULL, label TEXT",
}
MEMCPY_KINDS = [(0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD",
                "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
                (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
                (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer")]  # fmt: skip


def gpid(pid):
    return (1 << 48) | (pid << 24)


def add_cuda(path, tables, strings=None, memcpy_enum=True):
    """Add CUDA tables to an export: ``tables`` maps a table name to row dicts; ``strings``
    the StringIds the rows' name columns refer to."""
    db = sqlite3.connect(path)
    for name, rows in tables.items():
        db.execute(f"CREATE TABLE IF NOT EXISTS {name} ({CUDA_TABLES[name]})")
        for row in rows:
            db.execute(
                f"INSERT INTO {name} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
    if memcpy_enum:
        db.execute(f"CREATE TABLE ENUM_CUDA_MEMCPY_OPER ({CUDA_TABLES['ENUM_CUDA_MEMCPY_OPER']})")
        db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_KINDS)
    for sid, value in (strings or {}).items():
        db.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, value))
    db.commit()
    db.close()
    return path
