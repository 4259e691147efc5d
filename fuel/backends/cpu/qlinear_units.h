/* The quantized kernels' and the float matmul's share of the work pool (qlinear_conv.py,
 * qlinear_pool.py, qlinear_elementwise.py and matmul.py put this before their sources;
 * c_library.POOL_UNITS): the parallel loops run on the float
 * convolutions' work pool (conv_common.h's pool_run_units in conv.c, whose address each
 * library is handed once with a POOL_SHARE call, sizes[0] == POOL_SHARE and data[0] the
 * function): the caller and up to `team` - 1 helpers claim units, and the caller runs every
 * unit no helper has started, so a helper preempted by another process costs its unfinished
 * unit, not a scheduler slice at a fork-join barrier (the machine's load needs no check).
 * One set of helpers serves the float and the quantized kernels (an OpenMP team beside it
 * spun on the core the pool's helper needed next). Without it (no float convolution
 * library) every unit runs on the caller. */
#include <stdint.h>

#if defined(__AVX512VBMI__)
#include <immintrin.h>
/* A plane's row written into a padded buffer: `span` bytes of `source` XOR `flip` (the
 * unsigned input made signed, or as it is), 64 at a time, the last part masked (the
 * depthwise quads' and the quantized max pool's padded planes). */
static inline void flip_row(uint8_t *row, const uint8_t *source, int64_t span, uint8_t flip) {
    const __m512i mask = _mm512_set1_epi8((char)flip);
    int64_t col = 0;
    for (; col + 64 <= span; col += 64)
        _mm512_storeu_si512(row + col, _mm512_xor_si512(_mm512_loadu_si512(source + col), mask));
    if (col < span) {
        const __mmask64 tail = (1ull << (span - col)) - 1;
        _mm512_mask_storeu_epi8(row + col, tail, _mm512_xor_si512(
            _mm512_maskz_loadu_epi8(tail, source + col), mask));
    }
}
#endif

typedef void (*unit_task)(void *context, int64_t unit);
typedef void (*run_units_function)(int64_t, int64_t, unit_task, void *);
static run_units_function shared_run_units = 0;
#define POOL_SHARE -7

static void run_units(int64_t count, int64_t team, unit_task task, void *context) {
    if (shared_run_units != 0 && team > 1 && count > 1)
        shared_run_units(count, team, task, context);
    else
        for (int64_t unit = 0; unit < count; unit++) task(context, unit);
}

/* Runs of consecutive items per unit: about 8 units a member, so that a unit is worth its
 * claim (every unit claimed bumps one counter both cores write: per plane of a 7x7
 * depthwise, 960 claims, two threads ran 1.3x faster than one instead of 2x). */
static inline int64_t run_length(int64_t count, int64_t team) {
    const int64_t units = 8 * (team > 1 ? team : 1);
    return count > units ? (count + units - 1) / units : 1;
}

typedef struct {
    unit_task task;
    void *context;
    int64_t count, length;
} Runs;

static inline void run_of(void *context, int64_t unit) {
    const Runs *runs = context;
    const int64_t end = (unit + 1) * runs->length < runs->count ? (unit + 1) * runs->length
                                                               : runs->count;
    for (int64_t item = unit * runs->length; item < end; item++) runs->task(runs->context, item);
}

/* run_units over `count` items in runs of run_length (items in order within a run). */
static inline void run_items(int64_t count, int64_t team, unit_task task, void *context) {
    Runs runs = {task, context, count, run_length(count, team)};
    if (runs.length == 1 || team <= 1) {
        run_units(count, team, task, context);
        return;
    }
    run_units((count + runs.length - 1) / runs.length, team, run_of, &runs);
}

/* Whether this call hands over the pool (sizes[0] == POOL_SHARE): then it is taken. */
static inline int take_pool(void **data, const int64_t *sizes) {
    if (sizes[0] != POOL_SHARE) return 0;
    shared_run_units = (run_units_function)data[0];
    return 1;
}

