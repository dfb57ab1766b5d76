from django.urls import path

from knowledge import api, views

urlpatterns = [
    path("collections/", views.collections_page, name="collections"),
    path("api/collections/", api.collections, name="api-collections"),
    path("api/collections/search", api.collection_search, name="api-collections-search"),
    path("api/collections/<int:collection_id>/", api.collection, name="api-collection"),
    path("api/collections/<int:collection_id>/documents/", api.documents, name="api-collection-documents"),
    path(
        "api/collections/<int:collection_id>/documents/<int:document_id>/",
        api.document,
        name="api-collection-document",
    ),
]
