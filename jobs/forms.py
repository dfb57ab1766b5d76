"""The admin's job submission form: files, a preset or custom instruction, a summary length."""

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator

from documents.uploads import UploadRejected, documents_from_files
from jobs.models import Job


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs) -> None:
        # An empty file becomes that document's error, not the whole form's.
        kwargs.setdefault("allow_empty_file", True)
        kwargs.setdefault(
            "widget", MultipleFileInput(attrs={"accept": ".txt,.md,.html,.htm,.pdf,.zip,.jsonl,.csv"})
        )
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


class JobCreateForm(forms.Form):
    name = forms.CharField(max_length=200, required=False)
    files = MultipleFileField(
        help_text="One or many .txt, .md, .html or .pdf files, a .zip of such files, "
        "or a .jsonl / .csv with id and text columns."
    )
    preset = forms.ChoiceField(choices=Job.Preset.choices, initial=Job.Preset.PARAGRAPH)
    instruction = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        max_length=4000,
        help_text="Only for the custom preset: what to write about each document.",
    )
    max_summary_tokens = forms.IntegerField(min_value=16)
    start = forms.BooleanField(required=False, initial=True, label="Start now")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["max_summary_tokens"]
        field.initial = settings.BULK_SUMMARY_TOKENS
        field.widget.attrs["max"] = field.max_value = settings.BULK_MAX_SUMMARY_TOKENS
        field.validators.append(MaxValueValidator(settings.BULK_MAX_SUMMARY_TOKENS))
        self.documents = iter(())

    def clean_files(self):
        files = self.cleaned_data["files"]
        try:
            self.documents = documents_from_files(files)
        except UploadRejected as exc:
            raise forms.ValidationError(str(exc)) from None
        return files

    def clean(self):
        data = super().clean()
        if data.get("preset") == Job.Preset.CUSTOM and not (data.get("instruction") or "").strip():
            self.add_error("instruction", "A custom preset needs an instruction.")
        return data
