/* The progress line: a ticker thread that stays silent for the first second, then redraws
 * "\r<label>: 42% (3.1 s)" on stderr (every 0.2 s on a terminal, every 2 s into a log), and ends the line with the
 * total time. Workers only add to an atomic counter, so OpenMP loops and opaque library calls share it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include "cli.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct progress {
    const char *label;
    int64_t total;
    _Atomic int64_t done;
    atomic_int stop;
    int printed, tty;
    double t0;
    pthread_t thread;
    int started;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void draw(progress_t *pr, double elapsed)
{
    const int64_t done = atomic_load(&pr->done);
    if (pr->total > 0)
        fprintf(stderr, "%s%s: %5.1f%% (%.1f s)%s", pr->tty ? "\r" : "", pr->label,
                100.0 * (double)(done < pr->total ? done : pr->total) / (double)pr->total, elapsed, pr->tty ? "" : "\n");
    else
        fprintf(stderr, "%s%s: %.1f s%s", pr->tty ? "\r" : "", pr->label, elapsed, pr->tty ? "" : "\n");
    fflush(stderr);
    pr->printed = 1;
}

static void *ticker(void *arg)
{
    progress_t *pr = arg;
    const double period = pr->tty ? 0.2 : 2.0;
    double next = 1.0;
    const struct timespec nap = {0, 50 * 1000 * 1000};
    while (!atomic_load(&pr->stop)) {
        nanosleep(&nap, NULL);
        const double e = now_s() - pr->t0;
        if (e >= next) {
            draw(pr, e);
            next = e + period;
        }
    }
    return NULL;
}

progress_t *progress_begin(const char *label, int64_t total)
{
    progress_t *pr = calloc(1, sizeof *pr);
    if (!pr)
        return NULL;
    pr->label = label;
    pr->total = total;
    atomic_init(&pr->done, 0);
    atomic_init(&pr->stop, 0);
    pr->tty = isatty(fileno(stderr));
    pr->t0 = now_s();
    pr->started = pthread_create(&pr->thread, NULL, ticker, pr) == 0;
    return pr;
}

void progress_add(progress_t *pr, int64_t done)
{
    if (pr)
        atomic_fetch_add(&pr->done, done);
}

void progress_end(progress_t *pr)
{
    if (!pr)
        return;
    atomic_store(&pr->stop, 1);
    if (pr->started)
        pthread_join(pr->thread, NULL);
    if (pr->printed)
        fprintf(stderr, "%s%s: done in %.1f s%s\n", pr->tty ? "\r" : "", pr->label, now_s() - pr->t0,
                pr->tty ? "          " : "");
    free(pr);
}
