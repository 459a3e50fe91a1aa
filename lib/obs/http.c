/* The Prometheus HTTP endpoint: GET /metrics answered with the text
 * exposition of the rank's last step, the same text as the textfile
 * (prom.c). A plain POSIX socket and one thread: Prometheus scrapes every
 * few seconds, one connection at a time is plenty, and a library that
 * embeds an HTTP framework for one page would drag a dependency into every
 * host program. The text is rendered by the training thread after each
 * step and swapped in under a mutex; the server thread copies it out and
 * sends it without the lock, so a slow client never stalls training. A
 * client that stays silent is dropped after a few seconds; stopping wakes
 * the thread through a pipe, so destroy never waits on a client. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "obs/obs.h"
#include "obs/obs_internal.h"

/* How long one client may take to send its request or read the answer. */
#define CLIENT_MS 3000

typedef struct llmt__obs_http llmt__obs_http;
struct llmt__obs_http {
    int fd;      /* listening socket */
    int wake[2]; /* a byte on wake[1]: stop */
    int32_t rank;
    pthread_t th;
    pthread_mutex_t mu;
    char *text; /* the exposition served now (malloc'd) */
    size_t len;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until c is ready for `ev`; 0 on a stop or when the deadline
 * passed. */
static int ready(const llmt__obs_http *h, int c, short ev, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p[2] = {{c, ev, 0}, {h->wake[0], POLLIN, 0}};
        int n = poll(p, 2, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || p[1].revents)
            return 0;
        return 1;
    }
}

static void send_all(const llmt__obs_http *h, int c, const char *b, size_t n, int64_t deadline)
{
    while (n > 0 && ready(h, c, POLLOUT, deadline)) {
        /* MSG_NOSIGNAL: a client that hung up must not SIGPIPE the host */
        ssize_t k = send(c, b, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return;
        b += k;
        n -= (size_t)k;
    }
}

static void reply(const llmt__obs_http *h, int c, const char *status, const char *type,
                  const char *body, size_t len, int head, int64_t deadline)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, type, len);
    send_all(h, c, hdr, (size_t)n, deadline);
    if (!head)
        send_all(h, c, body, len, deadline);
}

/* One connection: read the request head, answer, close. */
static void serve(llmt__obs_http *h, int c)
{
    int64_t deadline = now_ms() + CLIENT_MS;
    char req[4096];
    size_t have = 0;
    req[0] = 0;
    while (!strstr(req, "\r\n\r\n") && !strstr(req, "\n\n")) {
        if (have + 1 >= sizeof req || !ready(h, c, POLLIN, deadline))
            break;
        ssize_t k = recv(c, req + have, sizeof req - 1 - have, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            break;
        have += (size_t)k;
        req[have] = 0;
    }
    static const char text_type[] = "text/plain; charset=utf-8";
    char method[16] = "", path[256] = "";
    if (sscanf(req, "%15s %255s HTTP/", method, path) != 2) {
        static const char bad[] = "bad request\n";
        reply(h, c, "400 Bad Request", text_type, bad, sizeof bad - 1, 0, deadline);
        return;
    }
    int head = !strcmp(method, "HEAD");
    if (strcmp(method, "GET") && !head) {
        static const char no[] = "only GET and HEAD\n";
        reply(h, c, "405 Method Not Allowed", text_type, no, sizeof no - 1, 0, deadline);
        return;
    }
    size_t pl = strcspn(path, "?");
    if (pl != strlen("/metrics") || strncmp(path, "/metrics", pl)) {
        static const char nf[] = "not found: the metrics are at /metrics\n";
        reply(h, c, "404 Not Found", text_type, nf, sizeof nf - 1, head, deadline);
        return;
    }
    pthread_mutex_lock(&h->mu);
    size_t len = h->len;
    char *body = malloc(len ? len : 1);
    if (body)
        memcpy(body, h->text, len);
    pthread_mutex_unlock(&h->mu);
    if (!body) {
        static const char oom[] = "no memory\n";
        reply(h, c, "503 Service Unavailable", text_type, oom, sizeof oom - 1, head, deadline);
        return;
    }
    reply(h, c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len, head,
          deadline);
    free(body);
}

static void *loop(void *arg)
{
    llmt__obs_http *h = arg;
    for (;;) {
        struct pollfd p[2] = {{h->fd, POLLIN, 0}, {h->wake[0], POLLIN, 0}};
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        int c = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
            continue; /* the client left already, or out of descriptors */
        serve(h, c);
        close(c);
    }
    return NULL;
}

/* The text of (p, m) in a fresh buffer; NULL when out of memory. */
static char *render(int32_t rank, int64_t steps, const llmt_job_perf *p,
                    const llmt_job_metrics *m, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return NULL;
    llmt__obs_prom_text(f, rank, steps, p, m);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void http_free(llmt__obs_http *h)
{
    if (h->fd >= 0)
        close(h->fd);
    for (int i = 0; i < 2; i++)
        if (h->wake[i] >= 0)
            close(h->wake[i]);
    pthread_mutex_destroy(&h->mu);
    free(h->text);
    free(h);
}

llmt_status llmt__obs_serve(llmt__obs *o, const char *host, int port, int32_t rank, int *bound,
                            char *err, size_t errlen)
{
    if (o->http) {
        snprintf(err, errlen, "obs: the HTTP endpoint is already serving");
        return LLMT_ERR_STATE;
    }
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (port < 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        snprintf(err, errlen, "'%s:%d' is not an IPv4 address and a port 0..65535", host, port);
        return LLMT_ERR_INVALID_ARGUMENT;
    }
    llmt__obs_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "no memory");
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    h->fd = h->wake[0] = h->wake[1] = -1;
    h->rank = rank;
    pthread_mutex_init(&h->mu, NULL);
    h->text = render(rank, o->steps, NULL, NULL, &h->len);
    /* each step's failure names the call; errno says why */
    const char *what = NULL;
    int one = 1, e = 0;
    socklen_t al = sizeof a;
    /* non-blocking: a client gone between poll and accept must not stall
     * the thread in accept */
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (h->fd < 0)
        what = "socket";
    /* a restarted job may bind again while its old connections linger in
     * TIME_WAIT; a port another process listens on still fails */
    else if (setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        what = "setsockopt";
    else if (bind(h->fd, (struct sockaddr *)&a, sizeof a) != 0)
        what = "bind";
    else if (listen(h->fd, 16) != 0)
        what = "listen";
    else if (pipe2(h->wake, O_CLOEXEC) != 0)
        what = "pipe";
    else if (getsockname(h->fd, (struct sockaddr *)&a, &al) != 0)
        what = "getsockname";
    else if (!h->text)
        e = ENOMEM, what = "render";
    else if ((e = pthread_create(&h->th, NULL, loop, h)) != 0)
        what = "thread";
    if (!what) {
        *bound = ntohs(a.sin_port);
        o->http = h;
        return LLMT_OK;
    }
    if (!e)
        e = errno;
    snprintf(err, errlen, "%s %s:%d: %s%s", what, host, port, strerror(e),
             e == EADDRINUSE ? " (something listens there already: choose another port, "
                               "or 0 for any free one)"
                             : "");
    http_free(h);
    return e == ENOMEM ? LLMT_ERR_OUT_OF_MEMORY : LLMT_ERR_IO;
}

void llmt__obs_serve_update(llmt__obs *o, const llmt_job_perf *p, const llmt_job_metrics *m)
{
    llmt__obs_http *h = o ? o->http : NULL;
    if (!h)
        return;
    size_t len = 0;
    char *t = render(h->rank, o->steps, p, m, &len);
    if (!t)
        return; /* out of memory: the previous step's text stays */
    pthread_mutex_lock(&h->mu);
    char *old = h->text;
    h->text = t;
    h->len = len;
    pthread_mutex_unlock(&h->mu);
    free(old);
}

void llmt__obs_serve_stop(llmt__obs *o)
{
    llmt__obs_http *h = o->http;
    if (!h)
        return;
    o->http = NULL;
    ssize_t w;
    do
        w = write(h->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(h->th, NULL);
    http_free(h);
}
