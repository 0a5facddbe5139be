/* redis_server.c — see redis_server.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif

#include "redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static const char *server_path(void) {
    const char *p = getenv("SLUICE_REDIS_SERVER");
    return p && *p ? p : "redis-server";
}

bool test_redis_available(void) {
    const char *p = server_path();
    if (strchr(p, '/')) return access(p, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[4096];
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n && n + strlen(p) + 2 < sizeof buf) {
            memcpy(buf, path, n);
            buf[n] = '/';
            strcpy(buf + n + 1, p);
            if (access(buf, X_OK) == 0) return true;
        }
        path += n;
        if (*path == ':') path++;
    }
    return false;
}

/* 127.0.0.1:port (0: any port). */
static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    return a;
}

/* A socket connected to 127.0.0.1:port with 5 s send and receive timeouts
 * (Redis on a loaded machine can take a while), or -1. */
static int connect_loopback(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct timeval tv = { 5, 0 };
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = loopback(port);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* The kernel's range for outgoing connections' local ports, or the default. */
static void ephemeral_range(int *lo, int *hi) {
    *lo = 32768;
    *hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        int a, b;
        if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a) {
            *lo = a;
            *hi = b;
        }
        fclose(f);
    }
}

static bool port_bindable(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return false;
    struct sockaddr_in a = loopback(port);
    bool ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

/* A port from bind(0) lies in the range the kernel also gives outgoing
 * connections, so any connect() in a parallel test could take it as its local
 * port before the server binds it (a CI run lost a server that way). The port
 * is drawn at random outside that range instead, and checked to be free. */
int test_free_port(void) {
    int lo, hi;
    ephemeral_range(&lo, &hi);
    /* the larger of the gaps below and above the range, within 10000..65535 */
    int below_lo = 10000, below_hi = lo - 1, above_lo = hi + 1, above_hi = 65535;
    bool below = below_hi - below_lo >= above_hi - above_lo;
    int from = below ? below_lo : above_lo, to = below ? below_hi : above_hi;
    if (to - from < 100) { /* no room outside it: take bind(0)'s choice */
        from = 0;
        to = -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    for (int i = 0; i < 200 && to >= from; i++) {
        seed = seed * 1103515245u + 12345u;
        int port = from + (int)((seed >> 8) % (unsigned)(to - from + 1));
        if (port_bindable(port)) return port;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        close(s);
        return -1;
    }
    close(s);
    return ntohs(a.sin_port);
}

int test_redis_command(int port, const char *cmd, char *out, size_t out_len) {
    int s = connect_loopback(port);
    if (s < 0) return -1;
    char line[512];
    snprintf(line, sizeof line, "%s\r\n", cmd);
    if (write(s, line, strlen(line)) != (ssize_t)strlen(line)) {
        close(s);
        return -1;
    }
    char buf[512];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t k = read(s, buf + n, 1);
        if (k <= 0) break;
        n++;
        if (buf[n - 1] == '\n') break;
    }
    buf[n] = '\0';
    close(s);
    if (n == 0) return -1;
    if (out && out_len) snprintf(out, out_len, "%s", buf);
    return 0;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* The process id of the server answering on `port` (from INFO server), or -1
 * when none answers. A PONG alone could come from another test's server that
 * holds the port; the id says whether it is ours. */
static long answering_pid(int port) {
    int s = connect_loopback(port);
    if (s < 0) return -1;
    static const char cmd[] = "INFO server\r\n";
    if (write(s, cmd, sizeof cmd - 1) != (ssize_t)(sizeof cmd - 1)) {
        close(s);
        return -1;
    }
    char buf[8192];
    size_t n = 0;
    long pid = -1;
    while (n < sizeof buf - 1) {
        ssize_t k = read(s, buf + n, sizeof buf - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = '\0';
        const char *p = strstr(buf, "process_id:");
        if (p && strchr(p, '\n')) {
            pid = strtol(p + strlen("process_id:"), NULL, 10);
            break;
        }
    }
    close(s);
    return pid;
}

/* Starts redis-server with `argv` (NULL-terminated, argv[0] the program) in
 * r->dir, its standard input and output on /dev/null, killed if the test
 * dies. @return the child's pid, or -1 when fork() failed. */
static pid_t spawn(const test_redis_t *r, const char *const *argv) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
#endif
    (void)parent;
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
    }
    if (chdir(r->dir) != 0) _exit(127);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

/* One start on `port`: 0 when our server answers, 1 when it exited at start
 * (the port was taken: worth another port), -1 on any other failure. */
static int start_once(test_redis_t *r, int port) {
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *argv[] = { server_path(),  "--port", port_s,        "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no",     "--daemonize", "no",     "--dir",     r->dir,   "--loglevel",
                           "warning",      NULL };
    pid_t pid = spawn(r, argv);
    if (pid < 0) return -1;
    r->pid = pid;
    r->port = port;
    for (int i = 0; i < 3000; i++) { /* up to 30 s: a loaded machine can be slow to start it */
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "redis-server exited at start (port %d)\n", port);
            r->pid = 0;
            return 1;
        }
        if (answering_pid(port) == (long)pid) return 0;
        sleep_ms(10);
    }
    fprintf(stderr, "redis-server did not answer on port %d\n", port);
    test_redis_stop(r);
    return -1;
}

/* Before a start: redis-server is there, and the server's directory made
 * (once per test_redis_t). @return 0 or -1 with a message on stderr. */
static int prepare(test_redis_t *r) {
    if (!test_redis_available()) {
        fprintf(stderr, "redis-server not found (set SLUICE_REDIS_SERVER or install redis-server)\n");
        return -1;
    }
    if (r->dir[0] == '\0') {
        snprintf(r->dir, sizeof r->dir, "/tmp/sluice-redis-XXXXXX");
        if (!mkdtemp(r->dir)) {
            fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
            r->dir[0] = '\0';
            return -1;
        }
    }
    return 0;
}

int test_redis_start(test_redis_t *r, int port) {
    if (prepare(r) != 0) return -1;
    if (port != 0) return start_once(r, port) == 0 ? 0 : -1;
    /* a free port can still be taken before the server binds it: another one */
    for (int attempt = 0; attempt < 10; attempt++) {
        int p = test_free_port();
        if (p <= 0) break;
        int rc = start_once(r, p);
        if (rc <= 0) return rc;
    }
    fprintf(stderr, "no free port for redis-server\n");
    return -1;
}

void test_redis_signal(test_redis_t *r, int sig) {
    if (r->pid > 0) kill(r->pid, sig);
}

void test_redis_stop(test_redis_t *r) {
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGTERM);
        int st;
        bool done = false;
        for (int i = 0; i < 300 && !done; i++) { /* up to 3 s, then SIGKILL */
            if (waitpid(r->pid, &st, WNOHANG) == r->pid)
                done = true;
            else
                sleep_ms(10);
        }
        if (!done) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, &st, 0);
        }
        r->pid = 0;
    }
    if (r->dir[0]) {
        char path[128];
        snprintf(path, sizeof path, "%s/dump.rdb", r->dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/redis.log", r->dir); /* test_redis_start_opts() */
        unlink(path);
        snprintf(path, sizeof path, "%s/sentinel.conf", r->dir); /* a Sentinel's */
        unlink(path);
        rmdir(r->dir);
        r->dir[0] = '\0';
    }
}

/* ---------------------------------------------------------------------------
 * Servers with extra options (test_redis_start_opts): Unix socket, password,
 * ACL user, TLS. */

#define OPT_ARGS 64

static void add_arg(const char **argv, int *argc, const char *a) {
    if (*argc < OPT_ARGS - 1) argv[(*argc)++] = a;
}

/* Whether the server's log says it is ready (a Sentinel: its ID is chosen). */
static bool log_says_ready(const char *dir, bool sentinel) {
    char path[128], buf[8192];
    snprintf(path, sizeof path, "%s/redis.log", dir);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, sentinel ? "Sentinel ID is" : "Ready to accept connections") != NULL;
}

/* One start with options: 0 ready, 1 exited at start, -1 other failure. */
static int start_opts_once(test_redis_t *r, int port, const test_redis_opts_t *o) {
    char port_s[16], log_path[128], acl[256];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(log_path, sizeof log_path, "%s/redis.log", r->dir);
    unlink(log_path);
    const char *argv[OPT_ARGS];
    int argc = 0;
    add_arg(argv, &argc, server_path());
    char conf_path[128];
    if (o->sentinel_conf) {
        snprintf(conf_path, sizeof conf_path, "%s/sentinel.conf", r->dir);
        FILE *cf = fopen(conf_path, "w");
        if (!cf) return -1;
        fprintf(cf, "port %s\nbind 127.0.0.1\ndir %s\nlogfile %s\nloglevel notice\n%s", port_s, r->dir, log_path,
                o->sentinel_conf);
        fclose(cf);
        add_arg(argv, &argc, conf_path);
        add_arg(argv, &argc, "--sentinel");
        goto spawn;
    }
    add_arg(argv, &argc, "--port");
    add_arg(argv, &argc, o->tls ? "0" : port_s);
    const char *fixed[] = { "--bind", "127.0.0.1", "--save", "",           "--appendonly", "no",        "--daemonize",
                            "no",     "--dir",     r->dir,   "--loglevel", "notice",       "--logfile", log_path };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) add_arg(argv, &argc, fixed[i]);
    if (o->unixsocket) {
        add_arg(argv, &argc, "--unixsocket");
        add_arg(argv, &argc, o->unixsocket);
        add_arg(argv, &argc, "--unixsocketperm");
        add_arg(argv, &argc, "700");
    }
    if (o->requirepass) {
        add_arg(argv, &argc, "--requirepass");
        add_arg(argv, &argc, o->requirepass);
    }
    if (o->acl_user) { /* one argument per word: the server joins them into the config line */
        snprintf(acl, sizeof acl, "%s", o->acl_user);
        add_arg(argv, &argc, "--user");
        for (char *save = NULL, *w = strtok_r(acl, " ", &save); w; w = strtok_r(NULL, " ", &save))
            add_arg(argv, &argc, w);
    }
    if (o->cluster) {
        const char *c[] = { "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf" };
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) add_arg(argv, &argc, c[i]);
    }
    if (o->tls) {
        const char *t[] = { "--tls-port",         port_s,
                            "--tls-cert-file",    o->tls_cert,
                            "--tls-key-file",     o->tls_key,
                            "--tls-ca-cert-file", o->tls_ca,
                            "--tls-auth-clients", o->tls_auth_clients ? "yes" : "no" };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) add_arg(argv, &argc, t[i]);
    }
spawn:
    argv[argc] = NULL;
    pid_t pid = spawn(r, argv);
    if (pid < 0) return -1;
    r->pid = pid;
    r->port = port;
    for (int i = 0; i < 3000; i++) { /* up to 30 s, as test_redis_start() */
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "redis-server (with options) exited at start (port %d)\n", port);
            r->pid = 0;
            return 1;
        }
        if (log_says_ready(r->dir, o->sentinel_conf != NULL)) return 0;
        sleep_ms(10);
    }
    fprintf(stderr, "redis-server (with options) not ready on port %d\n", port);
    test_redis_stop(r);
    return -1;
}

int test_redis_start_opts(test_redis_t *r, int port, const test_redis_opts_t *o) {
    if (prepare(r) != 0) return -1;
    if (port != 0) return start_opts_once(r, port, o) == 0 ? 0 : -1;
    for (int attempt = 0; attempt < 10; attempt++) {
        int p = test_free_port();
        if (p <= 0) break;
        int rc = start_opts_once(r, p, o);
        if (rc <= 0) return rc;
    }
    fprintf(stderr, "no free port for redis-server\n");
    return -1;
}
