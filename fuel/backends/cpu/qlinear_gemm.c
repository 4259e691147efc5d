/* The gemm form's driver: its units of work over the panels and tiles of qlinear_conv.c
 * (qlinear_conv.py builds qlinear_units.h, qlinear_conv.c, this file, qlinear_depthwise.c and
 * qlinear_conv_vnni.c as one source; qlinear_conv.c's header describes the operands and the
 * forms). */

/* ------------------------------------------------------------------ gemm: the units */

/* One band of one image and group of gemm(): what its two tasks share. */
typedef struct {
    const Q *q;
    const int8_t *w;
    const int32_t *bias;
    const float *mult;
    uint8_t *out;
    const uint8_t *source, *b;
    uint8_t *patches;
    int64_t oh0, oh1, start, band, stride, panels, blocks, rows_per_block, depth, per_out,
        image, group, plane, steps, row_blocks, panel_group, band_rows;
    const uint8_t *x;
    uint8_t uz, flip, panel_flip;
    int pointwise;
    size_t panel_bytes;
    int32_t correction;
    const int32_t *sums, *packed;
    uint8_t *band_panels; /* every panel of the band packed once (several row blocks), or NULL */
} GemmJob;

#define PATCH_ROWS 4 /* patch-matrix rows per unit of work */

/* Rows [PATCH_ROWS * unit, ...) of the band's patch matrix. */
static void gemm_patch_rows(void *context, int64_t unit) {
    const GemmJob *job = context;
    const int64_t last = (unit + 1) * PATCH_ROWS < job->depth ? (unit + 1) * PATCH_ROWS
                                                              : job->depth;
    for (int64_t k = unit * PATCH_ROWS; k < last; k++)
        patch_row(job->source, k, job->patches + k * job->band, job->uz, job->flip, job->oh0,
                  job->oh1, job->q);
}

/* Panel `index` of the band into band_panels. */
static void gemm_band_panel(void *context, int64_t index) {
    const GemmJob *job = context;
    const int64_t local = index * NR;
    const int cols = (int)(job->band - local < NR ? job->band - local : NR);
    pack_panel(job->b, job->stride, job->depth, job->pointwise ? job->start + local : local, cols,
               job->panel_flip, job->uz, job->band_panels + index * job->panel_bytes);
}

/* Panels [group_size * first, ...) of the band (4 where tile_out4 runs) times one block of
 * weight rows, re-quantized into out. */
static void gemm_panel(void *context, int64_t unit) {
    const GemmJob *job = context;
    const Q *q = job->q;
    const int64_t group_size = job->panel_group;
    const int64_t first_panel = unit / job->blocks * group_size, block = unit % job->blocks;
    const int64_t count = job->panels - first_panel < group_size ? job->panels - first_panel
                                                                 : group_size;
    const int64_t depth = job->depth, per_out = job->per_out, group = job->group;
    uint8_t *panels = job->band_panels != NULL
        ? job->band_panels + first_panel * job->panel_bytes
        : scratch(0, job->panel_bytes * (size_t)group_size);
    int last_cols = 0; /* positions of the last panel */
    for (int64_t j = 0; j < count; j++) {
        const int64_t local = (first_panel + j) * NR, p0 = job->start + local;
        const int cols = (int)(job->band - local < NR ? job->band - local : NR);
        last_cols = cols;
        if (job->band_panels == NULL)
            pack_panel(job->b, job->stride, depth, job->pointwise ? p0 : local, cols,
                   job->panel_flip, job->uz, panels + j * job->panel_bytes);
    }
    int32_t acc[MR * NR] __attribute__((aligned(32)));
    const int64_t first = group * per_out + block * job->rows_per_block;
    int64_t last = first + job->rows_per_block;
    if (last > (group + 1) * per_out) last = (group + 1) * per_out;
    for (int64_t m0 = first; m0 < last; m0 += MR) {
        const int rows = (int)(last - m0 < MR ? last - m0 : MR);
        int64_t j = 0;
#if defined(TILE_OUT)
        const int32_t *weights = job->packed + (group * job->row_blocks +
                                                (m0 - group * per_out) / MR) * MR * job->steps;
        uint8_t *target = job->out + job->image * q->m * job->plane + job->start +
                          first_panel * NR;
        if (count == 4) { /* (a panel's positions past the band hold u_zero) */
            tile_out4(weights, job->steps, m0, rows, panels, job->panel_bytes, job->bias, job->sums,
                      job->correction, job->mult, target, job->plane, last_cols, q);
            j = 4;
        }
        for (; j < count; j++) {
            const int64_t local = (first_panel + j) * NR;
            const int cols = (int)(job->band - local < NR ? job->band - local : NR);
            tile_out(weights, depth, m0, rows, panels + j * job->panel_bytes, job->bias,
                     job->sums, job->correction, job->mult, target + j * NR, job->plane, cols,
                     q);
        }
        continue;
#endif
        for (; j < count; j++) {
            const int64_t local = (first_panel + j) * NR, p0 = job->start + local;
            const int cols = (int)(job->band - local < NR ? job->band - local : NR);
            tile(job->w, depth, m0, rows, panels + j * job->panel_bytes, acc);
            for (int r = 0; r < rows; r++) {
                const int64_t m = m0 + r;
                uint8_t *target = job->out + (job->image * q->m + m) * job->plane + p0;
                const int32_t shift = job->bias[m] - job->correction * job->sums[m];
                const float scale = job->mult[m];
#if defined(__AVX2__)
                if (cols == NR) {
                    store_row(acc + r * NR, shift, scale, target, q);
                    continue;
                }
#endif
                for (int c = 0; c < cols; c++)
                    store_y(target, c, requantize(acc[r * NR + c] + shift, scale, q->yz), q);
            }
        }
    }
}

/* One band of output rows of one image and group, whole (gemm's band units: `unit` counts
 * bands image by image): its patch rows into this thread's own buffer, then its panels, so
 * the panels read the patch rows their own core wrote (built by k on both threads, half of
 * them crossed between the cores' caches: 16->64 3x3 at 55x55 ran 1.38x faster on two threads
 * than on one). */
static void gemm_band(void *context, int64_t unit) {
    const GemmJob *shared = context;
    const Q *q = shared->q;
    GemmJob job = *shared;
    const int64_t bands = (q->oh + shared->band_rows - 1) / shared->band_rows;
    const int64_t index = unit % bands, image_group = unit / bands;
    const int64_t per_in = q->c / q->groups;
    job.image = image_group / q->groups;
    job.group = image_group % q->groups;
    job.source = shared->x + (job.image * q->c + job.group * per_in) * q->h * q->w;
    job.oh0 = index * shared->band_rows;
    job.oh1 = job.oh0 + shared->band_rows < q->oh ? job.oh0 + shared->band_rows : q->oh;
    job.start = job.oh0 * q->ow;
    job.band = (job.oh1 - job.oh0) * q->ow;
    job.stride = job.band;
    job.panels = (job.band + NR - 1) / NR;
    job.blocks = 1;
    job.rows_per_block = (job.per_out + MR - 1) / MR * MR;
    job.patches = scratch(3, (size_t)(job.depth * job.band));
    job.b = job.patches;
    for (int64_t k = 0; k < job.depth; k++)
        patch_row(job.source, k, job.patches + k * job.band, job.uz, job.flip, job.oh0, job.oh1,
                  q);
    const int64_t groups = (job.panels + job.panel_group - 1) / job.panel_group;
    for (int64_t g = 0; g < groups; g++) gemm_panel(&job, g);
}

/* `prepacked`: gemm_pack's weights where tile_out runs (packed here, per launch, where NULL). */
static void gemm(const uint8_t *x, const int8_t *w, const int32_t *bias, const float *mult,
                 uint8_t *out, const Q *q, const int32_t *prepacked) {
    const int64_t per_in = q->c / q->groups, per_out = q->m / q->groups;
    const int64_t depth = per_in * q->kh * q->kw, plane = q->oh * q->ow;
    const int64_t steps = (depth + STEP - 1) / STEP;
    const int pointwise = q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->pt == 0 &&
                          q->pl == 0 && q->oh == q->h && q->ow == q->w;
    const uint8_t flip = q->x_signed ? 0x80 : 0;
    const uint8_t uz = (uint8_t)(q->xz + (q->x_signed ? 128 : 0));
#if defined(VNNI)
    const int32_t correction = uz; /* sum u * w - u_zero * sum w */
    const size_t panel_bytes = (size_t)(steps * NR * STEP);
#else
    const int32_t correction = 0; /* the panels hold u - u_zero already */
    const size_t panel_bytes = sizeof(int16_t) * (size_t)(steps * NR * STEP);
#endif
#if defined(TILE_OUT)
    const int64_t row_blocks = (per_out + MR - 1) / MR;
    const int32_t *packed = prepacked;
    if (packed == NULL) {
        int32_t *own = scratch(2, gemm_packed_bytes(q->groups, per_out, depth));
        gemm_pack(w, q->groups, per_out, depth, own);
        packed = own;
    }
    const int32_t *sums = packed + q->groups * row_blocks * MR * steps;
#else
    (void)prepacked;
    /* sum of each weight row (for the correction) */
    int32_t *sums = scratch(2, sizeof(int32_t) * (size_t)q->m);
    for (int64_t m = 0; m < q->m; m++) {
        int32_t total = 0;
        const int8_t *row = w + m * depth;
        for (int64_t k = 0; k < depth; k++) total += row[k];
        sums[m] = total;
    }
#endif
    /* the patch matrix a band of whole output rows at a time, about BAND bytes (in L2) */
    int64_t band_rows = pointwise ? q->oh : BAND / (depth * q->ow);
    if (band_rows < 1) band_rows = 1;
    if (band_rows > q->oh) band_rows = q->oh;
    uint8_t *patches = pointwise ? NULL : shared_buffer((size_t)(depth * band_rows * q->ow));
    GemmJob job = {q, w, bias, mult, out, NULL, NULL, patches, 0, 0, 0, 0, 0, 0, 1, MR,
                   depth, per_out, 0, 0, plane, steps, 0, 1, 0, x, uz, flip, 0, pointwise,
                   panel_bytes, correction, sums, NULL, NULL};
#if defined(TILE_OUT)
    job.packed = packed;
    job.row_blocks = row_blocks;
    job.panel_group = 4; /* tile_out4 */
#endif
    if (!pointwise && q->threads > 1) {
        /* band units (gemm_band): about 4 a thread over the launch's images and groups, of
         * 64 positions or more, within BAND bytes of patch rows */
        const int64_t planes = q->n * q->groups;
        const int64_t wanted = (4 * q->threads + planes - 1) / planes; /* bands an image */
        int64_t rows = (q->oh + wanted - 1) / wanted;
        if (rows * q->ow < 4 * NR) rows = (4 * NR + q->ow - 1) / q->ow;
        if (rows > band_rows) rows = band_rows;
        if (rows < 1) rows = 1;
        const int64_t bands = (q->oh + rows - 1) / rows;
        if (planes * bands >= 2 * q->threads) {
            job.band_rows = rows;
            job.panel_flip = 0;
            run_units(planes * bands, q->threads, gemm_band, &job);
            return;
        }
    }
    for (int64_t image = 0; image < q->n; image++)
        for (int64_t group = 0; group < q->groups; group++) {
            job.image = image;
            job.group = group;
            job.source = x + (image * q->c + group * per_in) * q->h * q->w;
            job.b = pointwise ? job.source : patches;
            job.panel_flip = pointwise ? flip : 0;
            for (int64_t oh0 = 0; oh0 < q->oh; oh0 += band_rows) {
                job.oh0 = oh0;
                job.oh1 = oh0 + band_rows < q->oh ? oh0 + band_rows : q->oh;
                job.start = oh0 * q->ow;
                job.band = (job.oh1 - oh0) * q->ow;
                job.stride = pointwise ? plane : job.band; /* of b's rows */
                job.panels = (job.band + NR - 1) / NR;
                const int64_t panel_groups = (job.panels + job.panel_group - 1) / job.panel_group;
                /* units of work: groups of panels x row blocks, enough blocks to share few
                 * panels */
                int64_t blocks = 1;
                while (panel_groups * blocks < 4 * q->threads && per_out / (blocks * 2) >= MR)
                    blocks *= 2;
                job.blocks = blocks;
                /* whole MR-row blocks each (tile_out's packed weights start at one) */
                job.rows_per_block = ((per_out + blocks - 1) / blocks + MR - 1) / MR * MR;
                if (!pointwise)
                    run_items((depth + PATCH_ROWS - 1) / PATCH_ROWS, q->threads, gemm_patch_rows,
                              &job);
                /* several row blocks read the same panels: packed once, not once a block (a
                 * deep 1x1 re-packed its panels per unit: 2048->512 at 7x7, 128 KiB of
                 * panels, took 433 us on one thread and 600 on two, 8 units) */
                job.band_panels = blocks > 1 ? scratch(1, job.panel_bytes * (size_t)job.panels)
                                             : NULL;
                if (job.band_panels != NULL)
                    run_items(job.panels, q->threads, gemm_band_panel, &job);
                run_units(panel_groups * blocks, q->threads, gemm_panel, &job);
            }
        }
}

