/* relay.c: a host thread that runs a link's relays in order (vk.h, "relay.c"), so that a
 * strategy submits a token's per-layer work on two devices and queues what the relay must
 * forward, then goes on: nothing on its own thread waits per layer. Deliberately only a queue
 * and a thread: what a job does is es__vk_link_relay's or es__vk_link_exchange's. */
#include "vk.h"

#include <string.h>

static void *relayer_main(void *arg) {
    es__vk_relayer *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->head == r->tail && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
        if (r->head == r->tail) break; /* stopped with nothing queued */
        const es__vk_relay_job j = r->jobs[r->head % ES__VK_RELAY_QUEUE];
        pthread_mutex_unlock(&r->mu);
        es_status s = ES_OK;
        if (r->status == ES_OK) /* after a failure the rest is skipped: the devices wait in vain */
            s = j.from < 0 ? es__vk_link_exchange(r->link, j.value, j.off, j.size, r->timeout_ns)
                           : es__vk_link_relay(r->link, j.from, j.value, j.off[0], j.size[0], r->timeout_ns);
        pthread_mutex_lock(&r->mu);
        if (s != ES_OK && r->status == ES_OK) r->status = s;
        r->head++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

es_status es__vk_relayer_start(es__vk_relayer *r, es__vk_link *l, uint64_t timeout_ns) {
    memset(r, 0, sizeof *r);
    es__vk_dev *d = l->dev[0];
    ES_RETURN_IF(!l->done[0], d->err, ES_ERR_INVALID_ARGUMENT, "vulkan: a relayer before es__vk_link_sync_create");
    r->link = l;
    r->timeout_ns = timeout_ns;
    ES_RETURN_IF(pthread_mutex_init(&r->mu, NULL) != 0, d->err, ES_ERR_BACKEND, "vulkan: relayer: pthread_mutex_init failed");
    if (pthread_cond_init(&r->cv, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        return es__fail(d->err, ES_ERR_BACKEND, "vulkan: relayer: pthread_cond_init failed");
    }
    if (pthread_create(&r->thread, NULL, relayer_main, r) != 0) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        return es__fail(d->err, ES_ERR_BACKEND, "vulkan: relayer: pthread_create failed");
    }
    r->running = true;
    return ES_OK;
}

static es_status push(es__vk_relayer *r, const es__vk_relay_job *j) {
    pthread_mutex_lock(&r->mu);
    while (r->tail - r->head == ES__VK_RELAY_QUEUE && r->status == ES_OK) pthread_cond_wait(&r->cv, &r->mu);
    const es_status s = r->status;
    if (s == ES_OK) r->jobs[r->tail++ % ES__VK_RELAY_QUEUE] = *j;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return s;
}

es_status es__vk_relayer_relay(es__vk_relayer *r, int from, uint64_t value, VkDeviceSize off, VkDeviceSize size) {
    const es__vk_relay_job j = {from == 0 ? 0 : 1, value, {off, 0}, {size, 0}};
    ES_RETURN_IF(from != 0 && from != 1, r->link->dev[0]->err, ES_ERR_INVALID_ARGUMENT, "vulkan: relay from side %d", from);
    return push(r, &j);
}

es_status es__vk_relayer_exchange(es__vk_relayer *r, uint64_t value, const VkDeviceSize off[2], const VkDeviceSize size[2]) {
    const es__vk_relay_job j = {-1, value, {off[0], off[1]}, {size[0], size[1]}};
    return push(r, &j);
}

es_status es__vk_relayer_drain(es__vk_relayer *r) {
    pthread_mutex_lock(&r->mu);
    while (r->head != r->tail) pthread_cond_wait(&r->cv, &r->mu);
    const es_status s = r->status;
    pthread_mutex_unlock(&r->mu);
    return s;
}

es_status es__vk_relayer_stop(es__vk_relayer *r) {
    if (!r->running) return ES_OK;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    r->running = false;
    return r->status;
}
