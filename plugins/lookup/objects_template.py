# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: objects_template
short_description: Render a role's template with the task's variables, without copying them first
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Renders each template file found in the role's C(templates) search path, as P(ansible.builtin.template#lookup)
    does, and returns the text.
  - P(ansible.builtin.template#lookup) deep-copies every variable of the task before each render. On the controller of
    a thousand-node cluster those hold the GPU hosts' facts (2 MB for 1000 nodes, more than once), and each render of the
    cluster roles' objects took 4 s copying them. This lookup hands the template a shallow copy instead; the template
    reads the variables and does not change them.
  - On a GPU node those hold its read (P(gpuops.nvidia.gpu_info#module)'s facts and the preflight's answers), and the
    container_toolkit role's refresh drop-ins, rendered wherever its settings are compared, took a tenth of a no-op
    C(node.yml) copying them.
  - The template sees the task's variables and the ones P(ansible.builtin.template#lookup) adds (C(ansible_managed)
    unless set, C(template_path) and the other C(template_*)); there are no options for other delimiters. With an
    ansible-core before 2.19, or one without those variables' helper, it is P(ansible.builtin.template#lookup) itself.
options:
  _terms:
    description: The template files, relative to the role's C(templates) directory.
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Render the objects of the device plugin
  ansible.builtin.set_fact:
    __objects: "{{ lookup('gpuops.nvidia.objects_template', 'objects.yml.j2') | from_yaml }}"
"""

RETURN = r"""
_raw:
  description: Each template file's text, rendered.
  type: list
  elements: str
"""

import os
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

try:  # ansible-core 2.19 and later: a template's text must be marked trusted to be rendered
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - an older ansible-core uses its own lookup
    trust_as_template = None
try:  # the variables ansible.builtin.template's lookup adds (ansible_managed, template_path, ...), made as it makes them
    from ansible._internal._templating._template_vars import generate_ansible_template_vars
except ImportError:  # pragma: no cover - there, the builtin lookup itself
    generate_ansible_template_vars = None


class LookupModule(LookupBase):

    def run(self, terms: list[str], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        if trust_as_template is None or generate_ansible_template_vars is None:  # pragma: no cover
            from ansible.plugins.loader import lookup_loader
            builtin: Any = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
            return builtin.run(terms, variables)
        rendered: list[str] = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "templates", term)
            if not path:
                raise AnsibleError(f"the template file {term} could not be found for the lookup")
            # Includes: the template's own directory first, then each search path's templates/ and itself.
            searchpath = [os.path.dirname(path)]
            for base in variables.get("ansible_search_path", []):
                searchpath += [os.path.join(base, "templates"), base]
            # A shallow copy, with the builtin lookup's variables (ansible_managed only where not set).
            available = dict(variables)
            available.update(generate_ansible_template_vars(path=term, fullpath=path, include_ansible_managed="ansible_managed" not in available))
            templar = self._templar.copy_with_new_env(available_variables=available, searchpath=searchpath)
            rendered.append(templar.template(trust_as_template(self._loader.get_text_file_contents(path)), escape_backslashes=False))
        return rendered
