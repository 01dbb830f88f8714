/* scan_kineto: one pass over a Kineto trace's bytes, straight into columns (the Python side is kineto_scan.py).

Decoding a Kineto trace into Python objects (even msgspec's typed structs) and then reading their fields costs more
than the rest of the import together: most of the bytes are values no importer needs (call stacks, input types,
flow events), and the needed ones become columns anyway. This scanner validates the whole document as JSON while
it reads the few fields the importer uses into C arrays; strings and raw values are interned, so each distinct one
becomes one Python object at the end. The scan itself runs without the GIL (a diff loads its two inputs at once).
A gzip trace is scanned as it is inflated, through a window of its bytes (stream.h): nothing the scan keeps points
into them (interned strings and top-level members are copied; events are kept as document offsets).

The scanner serves only the plain, well-formed case and says so by returning None otherwise: invalid JSON, a
document that is not an object with a `traceEvents` array of objects, `ts` that is not a JSON number with at most
three decimals, pid / tid that are neither integers nor strings, a `ph` that is not a one-character string, ...
The caller then takes the general path, which reads every valid trace and explains every invalid one.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "intern.h"
#include "lex.h"
#include "stream.h"

/* kinds of a value column */
enum { K_ABSENT = 0, K_INT = 1, K_STR = 2, K_RAW = 3 };

/* ---- the columns ---------------------------------------------------------------------------------------------- */

typedef struct {
    Vec kind;  /* uint8 */
    Vec val;   /* int64: the integer, or the code of the string / raw text */
} ValueCol;

typedef struct {
    Interner strings; /* string bodies as written (escapes included) */
    Interner raws;    /* raw JSON texts */
    Vec ph;           /* uint8: the phase character */
    Vec name, cat;    /* int32 string codes, -1 absent / null */
    ValueCol pid, tid, corr, stream, argname;
    Vec dims;         /* int32 raw code of args["Input Dims"], -1 absent */
    Vec ts_ns;        /* int64 */
    Vec ts_kind;      /* uint8: 0 absent / null, 1 number */
    Vec dur;          /* double, NaN absent / null */
    Vec args_kind;    /* uint8: 0 absent, 1 object, 2 anything else */
    Vec span;         /* int64 pairs: the event's first and past-the-last byte (document offsets) */
    Vec top;          /* int64 quadruples: key body start, length, value start, length (in top_text) */
    Vec top_text;     /* char: copies of the other top-level members' keys and values */
    size_t n;
    size_t rows;      /* rows every column has room for */
    const char *buf;  /* the document's bytes held: [base, ...) at buf[0] */
    size_t base, total;
    Stream *arriving; /* the document is still arriving (stream.h), buf and base follow its window; NULL: it is
                         all there */
} Columns;

static int value_col_init(ValueCol *v) { return vec_init(&v->kind, 1) && vec_init(&v->val, 8); }

static void value_col_free(ValueCol *v) {
    free(v->kind.data);
    free(v->val.data);
}

static int columns_init(Columns *t) {
    memset(t, 0, sizeof(*t));
    return interner_init(&t->strings) && interner_init(&t->raws) && vec_init(&t->ph, 1) && vec_init(&t->name, 4) &&
           vec_init(&t->cat, 4) && value_col_init(&t->pid) && value_col_init(&t->tid) && value_col_init(&t->corr) &&
           value_col_init(&t->stream) && value_col_init(&t->argname) && vec_init(&t->dims, 4) &&
           vec_init(&t->ts_ns, 8) && vec_init(&t->ts_kind, 1) && vec_init(&t->dur, 8) && vec_init(&t->args_kind, 1) &&
           vec_init(&t->span, 8) && vec_init(&t->top, 8) && vec_init(&t->top_text, 1);
}

static void columns_free(Columns *t) {
    interner_free(&t->strings);
    interner_free(&t->raws);
    Vec *vecs[] = {&t->ph,   &t->name,      &t->cat,  &t->dims, &t->ts_ns,   &t->ts_kind,
                   &t->dur,  &t->args_kind, &t->span, &t->top,  &t->top_text};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) free(vecs[i]->data);
    ValueCol *cols[] = {&t->pid, &t->tid, &t->corr, &t->stream, &t->argname};
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) value_col_free(cols[i]);
}

static int grow_columns(Columns *t, size_t n) {
    return vec_grow(&t->ph, n) && vec_grow(&t->name, n) && vec_grow(&t->cat, n) && vec_grow(&t->pid.kind, n) &&
           vec_grow(&t->pid.val, n) && vec_grow(&t->tid.kind, n) && vec_grow(&t->tid.val, n) &&
           vec_grow(&t->corr.kind, n) && vec_grow(&t->corr.val, n) && vec_grow(&t->stream.kind, n) &&
           vec_grow(&t->stream.val, n) && vec_grow(&t->argname.kind, n) && vec_grow(&t->argname.val, n) &&
           vec_grow(&t->dims, n) && vec_grow(&t->ts_ns, n) && vec_grow(&t->ts_kind, n) && vec_grow(&t->dur, n) &&
           vec_grow(&t->args_kind, n) && vec_grow(&t->span, 2 * n);
}

/* Room for n rows in every column: checked once per row, grown (doubling) together. */
static inline int grow_row(Columns *t, size_t n) {
    if (n <= t->rows) return 1;
    size_t rows = t->rows ? t->rows : 1024;
    while (rows < n) rows *= 2;
    if (!grow_columns(t, rows)) return 0;
    t->rows = rows;
    return 1;
}

#define AT(vec, type, i) (((type *)(vec).data)[i])

static int key_is(const char *body, size_t len, const char *word) {
    size_t n = strlen(word);
    return len == n && memcmp(body, word, n) == 0;
}

/* An integer literal that fits int64. */
static int int_value(const Number *n, int64_t *out) {
    if (!n->is_int) return 0;
    const char *p = n->start, *end = n->start + n->len;
    int neg = *p == '-';
    if (neg) p++;
    if (end - p > 18) return 0; /* 18 digits always fit */
    int64_t v = 0;
    for (; p < end; p++) v = v * 10 + (*p - '0');
    *out = neg ? -v : v;
    return 1;
}

/* At a string: its code. */
static int read_string(Columns *t, Cursor *c, int32_t *code) {
    const char *body;
    size_t len;
    int escaped;
    if (!lex_string(c, &body, &len, &escaped)) return 0;
    *code = intern(&t->strings, body, len);
    return *code >= 0;
}

/* Any value into a value column: integers as themselves, strings by code, the rest by raw code. */
static int read_value(Columns *t, Cursor *c, ValueCol *col, size_t row) {
    const char *start = c->p;
    if (c->p < c->end && *c->p == '"') {
        int32_t code;
        if (!read_string(t, c, &code)) return 0;
        AT(col->kind, uint8_t, row) = K_STR;
        AT(col->val, int64_t, row) = code;
        return 1;
    }
    if (c->p < c->end && (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) {
        Number n;
        if (!lex_number(c, &n)) return 0;
        int64_t v;
        if (int_value(&n, &v)) {
            AT(col->kind, uint8_t, row) = K_INT;
            AT(col->val, int64_t, row) = v;
            return 1;
        }
    } else {
        if (c->p + 4 <= c->end && memcmp(c->p, "null", 4) == 0) {
            c->p += 4;
            AT(col->kind, uint8_t, row) = K_ABSENT;
            return 1;
        }
        if (!skip_value(c)) return 0;
    }
    int32_t code = intern(&t->raws, start, (size_t)(c->p - start));
    if (code < 0) return 0;
    AT(col->kind, uint8_t, row) = K_RAW;
    AT(col->val, int64_t, row) = code;
    return 1;
}

/* A string or null into a code column (-1: null); anything else is not the plain case. */
static int read_string_code(Columns *t, Cursor *c, int32_t *out) {
    if (c->p < c->end && *c->p == '"') return read_string(t, c, out);
    if (lex_literal(c, "null", 4)) {
        *out = -1;
        return 1;
    }
    return 0;
}

/* `ts`: µs with at most three decimals -> exact int64 ns. */
static int read_ts(Cursor *c, int64_t *ns, uint8_t *kind) {
    if (lex_literal(c, "null", 4)) {
        *kind = 0;
        *ns = 0;
        return 1;
    }
    Number n;
    if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) || !lex_number(c, &n) || n.has_exp)
        return 0;
    const char *p = n.start, *end = n.start + n.len, *dot = n.dot ? n.dot : end;
    int neg = *p == '-';
    if (neg) p++;
    if (end - dot - 1 > 3) return 0; /* more decimals than ns: the general path rounds them */
    uint64_t v = 0;
    int decimals = 0;
    for (; p < end; p++) {
        if (p == dot) continue;
        if (v > (uint64_t)INT64_MAX / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
        if (p > dot) decimals++;
    }
    for (; decimals < 3; decimals++) {
        if (v > (uint64_t)INT64_MAX / 10) return 0;
        v *= 10;
    }
    if (v > (uint64_t)INT64_MAX) return 0;
    *ns = neg ? -(int64_t)v : (int64_t)v;
    *kind = 1;
    return 1;
}

/* A decimal of at most 15 digits and no exponent, exactly as strtod reads it: its digits as an integer are exact
   in a double (< 2^53), and so is 10^k for k <= 22, so one IEEE division rounds the quotient as strtod rounds the
   decimal (Clinger's fast path). 0: not such a number. */
static int small_decimal(const Number *n, double *out) {
    static const double tens[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    if (n->has_exp) return 0;
    const char *p = n->start, *end = n->start + n->len;
    int neg = *p == '-', digits = 0, decimals = 0;
    if (neg) p++;
    uint64_t v = 0;
    for (; p < end; p++) {
        if (p == n->dot) continue;
        if (++digits > 15) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
        if (n->dot && p > n->dot) decimals++;
    }
    double x = (double)v / tens[decimals];
    *out = neg ? -x : x;
    return 1;
}

static int read_dur(Cursor *c, double *out) {
    if (lex_literal(c, "null", 4)) {
        *out = NAN;
        return 1;
    }
    Number n;
    char buf[64];
    if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) || !lex_number(c, &n)) return 0;
    if (small_decimal(&n, out)) return 1;
    if (n.len >= sizeof(buf)) return 0;
    memcpy(buf, n.start, n.len);
    buf[n.len] = 0;
    *out = strtod(buf, NULL);
    return 1;
}

static int read_pid(Columns *t, Cursor *c, ValueCol *col, size_t row) {
    if (!read_value(t, c, col, row)) return 0;
    return AT(col->kind, uint8_t, row) != K_RAW; /* a float, a bool, an object: the general path says so */
}

static void clear_value(ValueCol *col, size_t row) {
    AT(col->kind, uint8_t, row) = K_ABSENT;
    AT(col->val, int64_t, row) = 0; /* never read, but every byte handed to Python is defined */
}

static void clear_args(Columns *t, size_t row) {
    clear_value(&t->corr, row);
    clear_value(&t->stream, row);
    clear_value(&t->argname, row);
    AT(t->dims, int32_t, row) = -1;
}

static int read_dims(Columns *t, Cursor *c, size_t row) {
    const char *start = c->p;
    if (!skip_value(c)) return 0;
    int32_t code = intern(&t->raws, start, (size_t)(c->p - start));
    AT(t->dims, int32_t, row) = code;
    return code >= 0;
}

static int read_args(Columns *t, Cursor *c, size_t row) {
    clear_args(t, row); /* a second args member replaces the first, as in the general path's JSON */
    if (c->p >= c->end || *c->p != '{') {
        AT(t->args_kind, uint8_t, row) = 2;
        return skip_value(c);
    }
    AT(t->args_kind, uint8_t, row) = 1;
    int more = enter(c, '}');
    while (more > 0) {
        const char *key;
        size_t klen;
        int escaped;
        /* a key spelled with escapes ("n\u0061me") is for the general path, which decodes it */
        if (!member_key(c, &key, &klen, &escaped) || escaped) return 0;
        int ok;
        if (key_is(key, klen, "correlation")) {
            ok = read_value(t, c, &t->corr, row);
        } else if (key_is(key, klen, "stream")) {
            ok = read_value(t, c, &t->stream, row);
        } else if (key_is(key, klen, "name")) {
            ok = read_value(t, c, &t->argname, row);
        } else if (key_is(key, klen, "Input Dims")) {
            ok = read_dims(t, c, row);
        } else {
            ok = skip_value(c);
        }
        if (!ok) return 0;
        more = next_member(c, '}');
    }
    return more == 0;
}

/* `ph`: one plain character; anything else (null, a number, an escape) is for the general path */
static int read_ph(Cursor *c, uint8_t *out) {
    const char *body;
    size_t len;
    int escaped;
    if (c->p >= c->end || *c->p != '"' || !lex_string(c, &body, &len, &escaped) || len != 1 || escaped) return 0;
    *out = (uint8_t)body[0];
    return 1;
}

static int read_member(Columns *t, Cursor *c, size_t row, const char *key, size_t klen) {
    switch (klen) { /* by length first: most members of an event are these eight */
        case 2:
            if (memcmp(key, "ph", 2) == 0) return read_ph(c, &AT(t->ph, uint8_t, row));
            if (memcmp(key, "ts", 2) == 0)
                return read_ts(c, &AT(t->ts_ns, int64_t, row), &AT(t->ts_kind, uint8_t, row));
            break;
        case 3:
            if (memcmp(key, "pid", 3) == 0) return read_pid(t, c, &t->pid, row);
            if (memcmp(key, "tid", 3) == 0) return read_pid(t, c, &t->tid, row);
            if (memcmp(key, "cat", 3) == 0) return read_string_code(t, c, &AT(t->cat, int32_t, row));
            if (memcmp(key, "dur", 3) == 0) return read_dur(c, &AT(t->dur, double, row));
            break;
        case 4:
            if (memcmp(key, "name", 4) == 0) return read_string_code(t, c, &AT(t->name, int32_t, row));
            if (memcmp(key, "args", 4) == 0) return read_args(t, c, row);
            break;
        default:
            break;
    }
    return skip_value(c);
}

static int read_event(Columns *t, Cursor *c, size_t row) {
    if (!grow_row(t, row + 1)) return 0;
    AT(t->ph, uint8_t, row) = 0;
    AT(t->name, int32_t, row) = -1;
    AT(t->cat, int32_t, row) = -1;
    clear_value(&t->pid, row);
    clear_value(&t->tid, row);
    clear_args(t, row);
    AT(t->ts_ns, int64_t, row) = 0;
    AT(t->ts_kind, uint8_t, row) = 0;
    AT(t->dur, double, row) = NAN;
    AT(t->args_kind, uint8_t, row) = 0;
    if (c->p >= c->end || *c->p != '{') return 0;
    int more = enter(c, '}');
    while (more > 0) {
        const char *key;
        size_t klen;
        int escaped;
        if (!member_key(c, &key, &klen, &escaped) || escaped || !read_member(t, c, row, key, klen)) return 0;
        more = next_member(c, '}');
    }
    return more == 0;
}

/* ---- where the bytes are (stream.h) ---------------------------------------------------------------------------- */

static inline size_t offset_of(const Columns *t, const char *p) { return t->base + (size_t)(p - t->buf); }
static inline const char *at_offset(const Columns *t, size_t offset) { return t->buf + (offset - t->base); }


static void follow_window(Columns *t) {
    t->buf = t->arriving->buf;
    t->base = t->arriving->base;
}

/* Before an item: let the cursor see at least the stream's margin ahead, sliding the window to the item when that
   is past its end (nothing before the item is needed any more). Moves the bytes: pointers into them are stale. */
static void ahead(Columns *t, Cursor *c) {
    Stream *s = t->arriving;
    if (!s) return;
    size_t at = offset_of(t, c->p), want = at + s->margin;
    if (want > s->total) want = s->total;
    /* slid at three quarters of the window: the quarter moved is little, and it leaves the feeder room while the
       scanner reads on */
    if (want > s->base + s->cap || (at - s->base) * 4 > s->cap * 3) {
        stream_slide(s, at);
        follow_window(t);
    }
    c->p = at_offset(t, at);
    c->end = at_offset(t, stream_wait(s, want));
}

/* An item (from offset `from` on) failed to parse: if the edge of what had arrived may have cut it, wait for more
   (twice what the item had, the window slid to it and grown as needed), put the cursor back at its start and say
   so (the caller reads it again); 0: the failure stands. Moves the bytes: pointers into them are stale. */
static int again(Columns *t, Cursor *c, size_t from) {
    Stream *s = t->arriving;
    if (!s) return 0;
    size_t seen = offset_of(t, c->end);
    if (seen >= s->total) return 0;
    size_t want = seen + (seen - from > 0 ? seen - from : 1);
    if (want > s->total) want = s->total;
    stream_slide(s, from);
    if (!stream_grow(s, want - from)) return 0;
    follow_window(t);
    size_t avail = stream_wait(s, want);
    if (avail <= seen) return 0; /* ended short: aborted */
    c->p = at_offset(t, from);
    c->end = at_offset(t, avail);
    return 1;
}

/* ---- the document --------------------------------------------------------------------------------------------- */

/* One event (*end: past its last byte) and what follows it: 1 more events, 0 the array closed, -1 not the plain
   case. */
static int event_item(Columns *t, Cursor *c, size_t row, const char **end) {
    if (!read_event(t, c, row)) return -1;
    *end = c->p;
    return next_member(c, ']');
}

/* enter(), again while what follows the opening stopped at the edge of what had arrived (an empty container's
   close may be past it). */
static int enter_whole(Columns *t, Cursor *c, char close) {
    for (;;) {
        size_t open = offset_of(t, c->p);
        int depth = c->depth, more = enter(c, close);
        if (!(more > 0 && c->p == c->end) || !again(t, c, open)) return more;
        c->depth = depth;
    }
}

static int read_events(Columns *t, Cursor *c) {
    if (c->p >= c->end || *c->p != '[') return 0;
    size_t row = 0;
    int more = enter_whole(t, c, ']');
    while (more > 0) {
        ahead(t, c);
        for (;;) { /* the white space next_member skipped may have stopped at the edge of what had arrived */
            size_t from = offset_of(t, c->p);
            int depth = c->depth;
            skip_ws(c);
            const char *start = c->p, *end = NULL;
            more = event_item(t, c, row, &end);
            if (more >= 0) {
                AT(t->span, int64_t, 2 * row) = (int64_t)offset_of(t, start);
                AT(t->span, int64_t, 2 * row + 1) = (int64_t)offset_of(t, end);
                break;
            }
            if (!again(t, c, from)) return 0; /* read again, with more: same bytes, same codes */
            c->depth = depth;
        }
        row++;
    }
    t->n = row;
    return more == 0;
}

/* A top-level member other than traceEvents: copies of its key and value, for kineto_scan.py to parse. */
static int keep_top(Columns *t, Cursor *c, const char *key, size_t klen) {
    const char *start = c->p;
    if (!skip_value(c)) return 0;
    size_t vlen = (size_t)(c->p - start), at = t->top_text.len, i = t->top.len;
    if (!vec_grow(&t->top_text, at + klen + vlen) || !vec_grow(&t->top, i + 4)) return 0;
    memcpy(t->top_text.data + at, key, klen);
    memcpy(t->top_text.data + at + klen, start, vlen);
    t->top_text.len = at + klen + vlen;
    AT(t->top, int64_t, i) = (int64_t)at;
    AT(t->top, int64_t, i + 1) = (int64_t)klen;
    AT(t->top, int64_t, i + 2) = (int64_t)(at + klen);
    AT(t->top, int64_t, i + 3) = (int64_t)vlen;
    t->top.len = i + 4;
    return 1;
}

enum { TOP_EVENTS = 2 }; /* top_item: at the traceEvents array */

/* One top-level member's key and, for any other member, its value and what follows it: 1 more members, 0 the
   object closed, TOP_EVENTS at the value of traceEvents, -1 not the plain case. */
static int top_item(Columns *t, Cursor *c) {
    const char *key;
    size_t klen;
    int escaped;
    if (!member_key(c, &key, &klen, &escaped) || escaped) return -1;
    if (key_is(key, klen, "traceEvents")) return c->p < c->end ? TOP_EVENTS : -1; /* its '[' seen, or again */
    if (!keep_top(t, c, key, klen)) return -1;
    return next_member(c, '}');
}

/* At the end of the top-level object: only white space may follow, to the document's end. */
static int nothing_after(Columns *t, Cursor *c) {
    for (;;) {
        skip_ws(c);
        if (c->p < c->end) return 0;
        if (!again(t, c, offset_of(t, c->p))) return offset_of(t, c->p) == t->total;
    }
}

/* The whole document; returns 1 if it is the plain case. */
static int scan_document(Columns *t) {
    Cursor c = {t->buf, t->buf + (t->arriving ? 0 : t->total), 0};
    ahead(t, &c);
    while (c.end - c.p < 3 && again(t, &c, 0)) {
    }
    if (c.end - c.p >= 3 && memcmp(c.p, "\xef\xbb\xbf", 3) == 0) return 0; /* a BOM: the general path decides */
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end) break;
        if (!again(t, &c, offset_of(t, c.p))) return 0;
    }
    if (*c.p != '{') return 0;
    int found = 0, more = enter_whole(t, &c, '}');
    while (more > 0) {
        ahead(t, &c);
        for (;;) {
            size_t from = offset_of(t, c.p), top = t->top.len, text = t->top_text.len;
            int depth = c.depth;
            skip_ws(&c);
            more = top_item(t, &c);
            if (more >= 0) break;
            if (!again(t, &c, from)) return 0; /* the member again, with more */
            c.depth = depth;
            t->top.len = top;
            t->top_text.len = text;
        }
        if (more != TOP_EVENTS) continue;
        if (found++ || !read_events(t, &c)) return 0; /* twice: the general path's JSON decides which one counts */
        for (;;) {
            size_t after = offset_of(t, c.p);
            int depth = c.depth;
            more = next_member(&c, '}');
            if (more >= 0 || !again(t, &c, after)) break;
            c.depth = depth;
        }
    }
    return more == 0 && found && nothing_after(t, &c);
}

/* ---- to Python ------------------------------------------------------------------------------------------------ */

static void put_utf8(char **out, uint32_t cp) {
    char *o = *out;
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    *out = o;
}

static uint32_t hex4(const char *p) {
    return (uint32_t)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

/* A string body (validated by lex_string) as a Python str; NULL with an exception for a lone surrogate. */
static PyObject *unescape(const char *p, size_t len) {
    if (memchr(p, '\\', len) == NULL) return PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "strict");
    char *buf = malloc(len + 1), *o = buf;
    if (!buf) return PyErr_NoMemory();
    const char *end = p + len;
    while (p < end) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        char e = p[1];
        p += 2;
        switch (e) {
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                uint32_t cp = hex4(p);
                p += 4;
                if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                    uint32_t lo = hex4(p + 2);
                    if (lo >= 0xdc00 && lo < 0xe000) {
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        p += 6;
                    }
                }
                if (cp >= 0xd800 && cp < 0xe000) {
                    free(buf);
                    PyErr_SetString(PyExc_ValueError, "a lone surrogate");
                    return NULL;
                }
                put_utf8(&o, cp);
                break;
            }
            default: *o++ = e; /* '"', '\\', '/' */
        }
    }
    PyObject *s = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)(o - buf), "strict");
    free(buf);
    return s;
}

static PyObject *bytes_of(const Vec *v, size_t n) { return PyBytes_FromStringAndSize(v->data, (Py_ssize_t)(v->item * n)); }

static PyObject *value_col(const ValueCol *v, size_t n) {
    return Py_BuildValue("(NN)", bytes_of(&v->kind, n), bytes_of(&v->val, n));
}

/* The columns as Python objects (None: not the plain case after all); frees nothing. */
static PyObject *columns_result(Columns *t) {
    PyObject *result = NULL, *strings = NULL, *raws = NULL;
    strings = PyList_New((Py_ssize_t)t->strings.count);
    raws = PyList_New((Py_ssize_t)t->raws.count);
    if (!strings || !raws) goto done;
    for (size_t i = 0; i < t->strings.count; i++) {
        PyObject *s = unescape(t->strings.spans[i].p, t->strings.spans[i].len);
        if (!s) { /* a lone surrogate: not the plain case */
            PyErr_Clear();
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        PyList_SET_ITEM(strings, (Py_ssize_t)i, s);
    }
    for (size_t i = 0; i < t->raws.count; i++) {
        PyObject *b = PyBytes_FromStringAndSize(t->raws.spans[i].p, (Py_ssize_t)t->raws.spans[i].len);
        if (!b) goto done;
        PyList_SET_ITEM(raws, (Py_ssize_t)i, b);
    }
    size_t n = t->n;
    result = Py_BuildValue(
        "{sn sN sN sN sN sN sN sN sN sN sN sN sN sN sN sN sN sO sO}", "n", (Py_ssize_t)n, "ph", bytes_of(&t->ph, n),
        "name", bytes_of(&t->name, n), "cat", bytes_of(&t->cat, n), "pid", value_col(&t->pid, n), "tid",
        value_col(&t->tid, n), "correlation", value_col(&t->corr, n), "stream", value_col(&t->stream, n),
        "arg_name", value_col(&t->argname, n), "input_dims", bytes_of(&t->dims, n), "ts_ns", bytes_of(&t->ts_ns, n),
        "ts_kind", bytes_of(&t->ts_kind, n), "dur_us", bytes_of(&t->dur, n), "args_kind", bytes_of(&t->args_kind, n),
        "span", bytes_of(&t->span, 2 * n), "top", bytes_of(&t->top, t->top.len), "top_text",
        bytes_of(&t->top_text, t->top_text.len), "strings", strings, "raws", raws);
done:
    Py_XDECREF(strings);
    Py_XDECREF(raws);
    return result;
}

PyObject *scan_kineto(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Columns t;
    if (!columns_init(&t)) {
        columns_free(&t);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    t.buf = (const char *)view.buf;
    t.total = (size_t)view.len;
    int plain;
    Py_BEGIN_ALLOW_THREADS
    plain = scan_document(&t);
    Py_END_ALLOW_THREADS
    PyObject *result = plain ? columns_result(&t) : Py_NewRef(Py_None);
    columns_free(&t);
    PyBuffer_Release(&view);
    return result;
}

Stream *stream_of(PyObject *capsule);

/* scan_stream(stream, margin) -> the columns once the stream is complete; False when it completed but is not the
   plain case (or not UTF-8); None when it was aborted. The document is not kept (stream.h): the caller inflates it
   again where it needs the bytes. margin: the bytes asked for ahead of each item (a Kineto event is well under
   1 kB; the tests use 0 to cut items at the edge of what has arrived). */
PyObject *scan_stream(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    Py_ssize_t margin;
    if (!PyArg_ParseTuple(args, "On", &capsule, &margin)) return NULL;
    Stream *s = stream_of(capsule);
    if (!s) return NULL;
    if (margin < 0 || s->scanned) {
        stream_close(s);
        PyErr_SetString(PyExc_ValueError, margin < 0 ? "a margin is not negative" : "a stream is scanned once");
        return NULL;
    }
    s->scanned = 1;
    s->margin = (size_t)margin;
    Columns t;
    if (!columns_init(&t) || !stream_grow(s, 2 * s->margin)) { /* ahead() slides by the margin at most */
        stream_close(s);
        columns_free(&t);
        return PyErr_NoMemory();
    }
    t.arriving = s;
    t.total = s->total;
    follow_window(&t);
    int plain, state;
    Py_BEGIN_ALLOW_THREADS
    plain = scan_document(&t);
    stream_close(s);
    state = stream_finish(s); /* complete: every byte came, as the gzip trailer said, and was checked as UTF-8 */
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (state != STREAM_COMPLETE) {
        result = Py_NewRef(Py_None);
    } else if (!plain || s->utf8.bad) {
        result = Py_NewRef(Py_False);
    } else {
        result = columns_result(&t);
        if (result == Py_None) {
            Py_DECREF(result);
            result = Py_NewRef(Py_False);
        }
    }
    columns_free(&t);
    return result;
}
