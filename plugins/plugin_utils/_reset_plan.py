# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which GPUs the role's reset stage resets, and which GPU clients block that reset.

Reads an ``nvidia_holders`` result as the module returns it. A GPU is stuck
when it holds more memory than the proof allows and no compute holder is left
on it: the memory outlived every process (a stuck context). Any process that
still holds a stuck GPU as a client, or a protected process on it, blocks the
reset; the module's own processes never do. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _on(holder, index):
    return index in (holder.get('gpus') or ())


def stuck_gpus(holders_result, max_used_mib):
    """The GPU records of ``holders_result`` whose memory outlived every compute holder."""
    holders = holders_result.get('holders') or []
    return [gpu for gpu in holders_result.get('gpus') or []
            if gpu.get('memory_used_mib', 0) > max_used_mib
            and not any(holder.get('kind') == 'compute' and _on(holder, gpu['index']) for holder in holders)]


def reset_plan(holders_result, max_used_mib):
    """``stuck`` GPU records, their ``indices``, and the ``blockers`` (holder records) of their reset."""
    stuck = stuck_gpus(holders_result, max_used_mib)
    indices = [gpu['index'] for gpu in stuck]
    blockers = [holder for holder in holders_result.get('holders') or []
                if (holder.get('protected') or holder.get('kind') == 'client') and not holder.get('is_self')
                and any(_on(holder, index) for index in indices)]
    return {'stuck': stuck, 'indices': indices, 'blockers': blockers}


def _gpus_over(gpus, key, max_used_mib):
    return [gpu for gpu in gpus or [] if key in gpu and (gpu.get(key) or 0) > max_used_mib]


def needs_look(release_gpus, first_gpus, max_used_mib):
    """Whether the reset stage looks at the holders: a GPU still over the limit after the release (its
    ``memory_used_mib_after``), or over it at the first look."""
    after = release_gpus if release_gpus is not None else first_gpus
    return bool(_gpus_over(after, 'memory_used_mib_after', max_used_mib)
                or _gpus_over(first_gpus, 'memory_used_mib', max_used_mib))


def _pids(holders):
    return ', '.join(str(holder.get('pid')) for holder in holders)


def _titles(holders):
    return ', '.join(str(holder.get('title')) for holder in holders)


def refusal(plan, out_of_scope, unstoppable):
    """Why the reset must not be tried, in the operator's words, or an empty string."""
    gpus = ', '.join(str(index) for index in plan['indices'])
    display = [gpu['index'] for gpu in plan['stuck'] if gpu.get('display_active')]
    if display:
        return ('GPU(s) %s drive a display and are never reset. Free them with a reboot.'
                % ', '.join(str(index) for index in display))
    if out_of_scope:
        return ("The reset of GPU(s) %s is blocked by pid %s (%s), GPU client(s) outside the release's scope "
                "(gpu_reclaim_scope_users, gpu_reclaim_scope_match, gpu_reclaim_scope_systemd_units, "
                "gpu_reclaim_scope_containers). Stop them by hand, or widen the scope."
                % (gpus, _pids(out_of_scope), _titles(out_of_scope)))
    if unstoppable:
        return ('The reset of GPU(s) %s is blocked by pid %s (%s), which run outside any system service that '
                'could be stopped and started again. Stop them by hand, or reboot.'
                % (gpus, _pids(unstoppable), _titles(unstoppable)))
    return ''


def failure_text(failed):
    """Why the reset failed, from the failed task's result (its msg and each failed item's stderr)."""
    if not failed:
        return ''
    stderr = [str(item.get('stderr') or '') for item in failed.get('results') or [] if item.get('failed')]
    return ' '.join([str(failed.get('msg') or '')] + stderr).strip() or 'nvidia-smi failed'


def restore_errors(persistence, clients):
    """What the reset stage could not restore: persistence mode per GPU, and each GPU client's unit."""
    errors = []
    for item in (persistence or {}).get('results') or []:
        if item.get('failed'):
            errors.append('persistence mode of GPU %s was not restored: %s'
                          % (item.get('item'), (item.get('stderr') or item.get('msg') or '').strip()))
    for item in (clients or {}).get('results') or []:
        if item.get('failed'):
            errors.append('%s was not started again: %s' % (item.get('item'), (item.get('msg') or '').strip()))
    return errors


def system_service(holder):
    """The system manager's ``.service`` a holder runs in, which root may stop and start again, or None.

    A unit of a user's manager (``user@UID.service``) is the user's to name: stopping a system unit of that
    name would stop someone else's service. A scope (a session, a container's) cannot be started again.
    """
    unit = holder.get('systemd_unit')
    if unit and holder.get('unit_manager') == 'system' and unit.endswith('.service'):
        return unit
    return None


def reset_stage(host, max_used_mib, release_gpus, first_gpus, results):
    """Everything the reset stage branches on or reports, from what its tasks registered.

    ``results`` holds ``before_reset`` (nvidia_holders with the release's scope options and kinds
    ``[client]``: each holder's ``in_scope`` is the release's own plan for it), ``reset_failure`` (the failed
    task's result, when the reset failed), ``restore_persistence`` and ``restore_clients``. A blocker is
    stopped through its unit when it is protected or within the release's scope; an unprotected client
    outside it, or a blocker outside any system service (``system_service``), refuses the reset.
    """
    plan = reset_plan(results.get('before_reset') or {}, max_used_mib)
    out_of_scope = [holder for holder in plan['blockers'] if not holder.get('protected') and not holder.get('in_scope')]
    blockers = [holder for holder in plan['blockers'] if holder not in out_of_scope]
    units = []
    for holder in blockers:
        unit = system_service(holder)
        if unit and unit not in units:
            units.append(unit)
    why_not = refusal(plan, out_of_scope, [holder for holder in blockers if not system_service(holder)])
    error = failure_text(results.get('reset_failure'))
    restored = restore_errors(results.get('restore_persistence'), results.get('restore_clients'))
    # The restores register whenever the reset was tried (check mode included).
    tried = bool(results.get('restore_persistence'))
    errors = (['the reset failed: ' + error] if error else []) + restored if tried else []
    gpus = ', '.join(str(index) for index in plan['indices'])
    if error:
        done = 'the reset of GPU(s) %s failed: %s.' % (gpus, error)
    else:
        done = 'GPU(s) %s were reset.' % gpus
    if restored:
        after = ('Not restored: %s. Restore them by hand (nvidia-smi -i N -pm 1, systemctl start UNIT).'
                 % '; '.join(restored))
    else:
        after = 'Persistence mode and the stopped GPU clients were restored.'
    return {
        'look': needs_look(release_gpus, first_gpus, max_used_mib),
        'stuck': plan['stuck'],
        'indices': plan['indices'],
        'run': bool(plan['indices']),
        'blockers': blockers,
        'out_of_scope': out_of_scope,
        'units': units,
        'persistent': [gpu['index'] for gpu in plan['stuck'] if gpu.get('persistence_mode')],
        'refused': bool(why_not),
        'refusal': why_not,
        'error': error,
        'reset_gpus': list(plan['indices']) if tried and not error else [],
        'errors': errors,
        'failed': bool(errors),
        'failure_message': ' '.join(part for part in (
            'The reset stage on %s:' % host, done, after, 'Next step: reboot the host.' if error else '') if part),
    }
