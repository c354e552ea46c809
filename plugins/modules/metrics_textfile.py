#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: metrics_textfile
short_description: Write a metrics file for node_exporter's textfile collector without following links
version_added: 0.1.0
description:
  - Writes O(content) to O(path) (mode C(0644)) under a random name in the same directory, then renames it into
    place, so the collector reads the old file or the new one, never half of one.
  - Runs as root, so nothing another user can create is used. Every directory of O(path) is opened without
    following a link, and one that another user can write (owned by anyone but root or the user the module runs
    as, or group or world writable unless it is sticky and root's, as C(/tmp)) fails the task before anything is
    written in it. A link on the way is followed only when it sits in a directory that passed that test. A link
    planted at O(path) is replaced, never followed.
  - The directory must exist, as the collector's own does.
  - The gpuops.reclaim.gpu_reclaim role writes its metrics with it (C(gpu_reclaim_metrics_textfile_dir)).
extends_documentation_fragment:
  - gpuops.reclaim.attributes
attributes:
  check_mode:
    support: full
    details:
      - Nothing is written in check mode; the directory is still checked.
  diff_mode:
    support: none
    details:
      - No diff is shown.
  idempotent:
    support: full
    details:
      - Always reports no change; the metrics describe a run, and writing them again changes nothing on the host.
options:
  path:
    description:
      - The absolute path of the metrics file, for example C(/var/lib/node_exporter/textfile/gpu_reclaim.prom).
    type: str
    required: true
  content:
    description:
      - The text to write, in Prometheus' text format.
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Write the last run's metrics for node_exporter
  gpuops.reclaim.metrics_textfile:
    path: /var/lib/node_exporter/textfile/gpu_reclaim.prom
    content: "{{ gpu_reclaim_summary | gpuops.reclaim.reclaim_metrics(now().timestamp()) }}"
'''

RETURN = r'''
path:
  description: The path written (or, in check mode, that would be written).
  returned: success
  type: str
  sample: /var/lib/node_exporter/textfile/gpu_reclaim.prom
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.reclaim.plugins.module_utils._host.safe_file import open_directory, write_text


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type='str', required=True),
                                              content=dict(type='str', required=True)),
                           supports_check_mode=True)
    path = module.params['path']
    try:
        if module.check_mode:
            os.close(open_directory(os.path.dirname(path) if path.startswith('/') else path))
        else:
            write_text(path, module.params['content'])
    except OSError as exc:
        module.fail_json(msg='path: could not write %s: %s' % (path, exc.strerror or exc), path=path)
    module.exit_json(changed=False, path=path)


if __name__ == '__main__':
    main()
